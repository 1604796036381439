//! Flux shard placement: the admission webhook (`scaler webhook`, [`webhook`]) and the placement
//! controller (`scaler shard-controller`, `scaler shards`, [`controller`]), sharing the watch
//! [`index`] of HelmReleases, tenant Namespaces and shard Deployments ([`watch`] keeps it current)
//! and the start-up both run (`start`).
use std::net::SocketAddr;
use std::str::FromStr;

use anyhow::Context as _;
use prometheus_client::registry::Registry;

use placement::shard::{ShardIndex, parse_shard_index};
use runtime::app::App;
use runtime::conn;

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

/// What the webhook and the controller both start with.
struct Started<M> {
    client: kube::Client,
    metrics: M,
    index: index::SharedIndex,
}

/// A Kubernetes client, the admin server (not ready yet) with the caller's metrics, and the
/// watch index of HelmReleases, tenant Namespaces and, unless `flux_namespace` is `None`, the
/// shard Deployments there; the admin server and the watches run in `app`.
async fn start<M>(
    app: &mut App,
    admin_listen: SocketAddr,
    register: impl FnOnce(&mut Registry) -> M,
    flux_namespace: Option<&str>,
) -> anyhow::Result<Started<M>> {
    conn::raise_fd_limit();
    let client = kube::Client::try_default()
        .await
        .context("building a Kubernetes client (in-cluster or KUBECONFIG)")?;
    let mut registry = Registry::default();
    let metrics = register(&mut registry);
    app.admin(admin_listen, registry).await?;
    let index = index::Index::shared();
    watch::spawn(app, client.clone(), index.clone(), flux_namespace);
    Ok(Started {
        client,
        metrics,
        index,
    })
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
