//! Flux shard placement: the admission webhook (`scaler webhook`, [`webhook`]) and the placement
//! controller (`scaler shard-controller`, `scaler shards`, [`controller`]), sharing the watch
//! [`index`] of HelmReleases, tenant Namespaces and shard Deployments, which [`watch`] keeps
//! current once `follow` has started it.
use std::str::FromStr;

use placement::shard::{ShardIndex, parse_shard_index};
use runtime::app::App;

pub mod controller;
pub mod index;
pub mod watch;
pub mod webhook;

/// `TENANT=shard<i>`.
#[derive(Debug, Clone)]
pub struct Pin(pub String, pub ShardIndex);

impl FromStr for Pin {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (tenant, shard) = s
            .split_once('=')
            .ok_or_else(|| format!("--pin {s:?}: expected TENANT=shard<i>"))?;
        let shard = parse_shard_index(shard).map_err(|e| format!("--pin {s:?}: {e}"))?;
        Ok(Pin(tenant.to_owned(), shard))
    }
}

/// The watch index of HelmReleases, tenant Namespaces and, unless `flux_namespace` is `None`,
/// the shard Deployments there, kept current by watches running in `app`.
pub(crate) fn follow(
    app: &mut App,
    client: kube::Client,
    flux_namespace: Option<&str>,
) -> index::SharedIndex {
    let index = index::Index::shared();
    watch::spawn(app, client, index.clone(), flux_namespace);
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_parse_canonical_shards_only() {
        let Pin(tenant, shard) = "tenant-big=shard2".parse().unwrap();
        assert_eq!((tenant.as_str(), shard), ("tenant-big", 2));
        for bad in [
            "tenant-big",
            "tenant-big=shard02",
            "tenant-big=2",
            "tenant-big=tenants",
        ] {
            let error = bad.parse::<Pin>().unwrap_err();
            assert!(error.contains("--pin") && error.contains(bad), "{error}");
        }
    }
}
