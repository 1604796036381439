//! The scale targets chartgen knows: which kind, where its count lives, and how KEDA reaches it
//! (directly through its `/scale` subresource, or through a ScaleAdapter for a kind without one,
//! docs/scale-adapter.md). A chart's kind is discovered from its templates; `--target-kind` names
//! another one, which is then driven like a CNPG Cluster.

use serde::Serialize;

/// The scaler's `engine` trigger metadata, and what follows from it for the chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Cnpg,
    Redis,
}

/// A known scale target.
#[derive(Debug)]
pub struct Known {
    pub engine: Engine,
    pub kind: &'static str,
    pub api_version: &'static str,
    /// Keys of the count under `spec`: the last is the template's replica field.
    pub path: &'static [&'static str],
}

pub const CNPG: Known = Known {
    engine: Engine::Cnpg,
    kind: "Cluster",
    api_version: "postgresql.cnpg.io/v1",
    path: &["instances"],
};

/// A RedisFailover (spotahome-derived redis-operator): no scale subresource, so the HPA drives a
/// ScaleAdapter that writes `spec.redis.replicas`.
pub const REDIS: Known = Known {
    engine: Engine::Redis,
    kind: "RedisFailover",
    api_version: "databases.spotahome.com/v1",
    path: &["redis", "replicas"],
};

pub const KNOWN: [&Known; 2] = [&CNPG, &REDIS];

impl Known {
    /// The replica field: the count's last key.
    pub fn field(&self) -> &'static str {
        self.path[self.path.len() - 1]
    }

    /// The mapping keys above the replica field (empty: anywhere in the target's manifest).
    pub fn parents(&self) -> &'static [&'static str] {
        &self.path[..self.path.len() - 1]
    }
}

/// What `--target-kind` (given) or the templates' `kind:` lines (`found`) say the target is:
/// the given kind's entry (CNPG's for a kind chartgen does not know), else the one known kind
/// the templates render, else CNPG's (whose refusal then names `kind: Cluster`).
pub fn discover(given: Option<&str>, found: &[&str]) -> Result<&'static Known, String> {
    if let Some(kind) = given {
        return Ok(KNOWN.into_iter().find(|k| k.kind == kind).unwrap_or(&CNPG));
    }
    let rendered: Vec<&Known> = KNOWN
        .into_iter()
        .filter(|k| found.contains(&k.kind))
        .collect();
    match rendered.as_slice() {
        [] => Ok(&CNPG),
        [one] => Ok(one),
        many => Err(format!(
            "the templates render several kinds chartgen can scale ({}); pass --target-kind with the one to scale",
            many.iter().map(|k| k.kind).collect::<Vec<_>>().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_is_discovered_from_the_templates_unless_given() {
        assert_eq!(
            discover(None, &["Service", "RedisFailover"])
                .unwrap()
                .engine,
            Engine::Redis
        );
        assert_eq!(
            discover(None, &["Cluster", "Pooler"]).unwrap().engine,
            Engine::Cnpg
        );
        assert_eq!(discover(None, &["Deployment"]).unwrap().kind, "Cluster");
        let both = discover(None, &["Cluster", "RedisFailover"]).unwrap_err();
        assert!(
            both.contains("--target-kind") && both.contains("RedisFailover"),
            "{both}"
        );
        assert_eq!(
            discover(Some("Cluster"), &["RedisFailover"])
                .unwrap()
                .engine,
            Engine::Cnpg
        );
        assert_eq!(
            discover(Some("Memcached"), &[]).unwrap().engine,
            Engine::Cnpg
        );
        assert_eq!(
            (REDIS.field(), REDIS.parents()),
            ("replicas", &["redis"][..])
        );
        assert!(CNPG.parents().is_empty());
    }
}
