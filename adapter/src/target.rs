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
    let selector = &spec.selector;
    if selector.trim().is_empty() || selector.len() > SELECTOR_MAX {
        return Err(format!(
            "selector must be a label selector of the target's pods of at most {SELECTOR_MAX} characters, e.g. app.kubernetes.io/component=redis,app.kubernetes.io/part-of=redis-failover,app.kubernetes.io/name=<name>"
        ));
    }
    Ok(Target {
        gvk: GroupVersionKind::gvk(&gv.group, &gv.version, kind),
        path,
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
            selector: "app=redis".into(),
        }
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
        s.selector = " ".into();
        assert!(validate(&s).unwrap_err().starts_with("selector"));
        s.selector = "a".repeat(SELECTOR_MAX + 1);
        assert!(validate(&s).unwrap_err().starts_with("selector"));
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
