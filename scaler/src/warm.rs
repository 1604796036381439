//! Warm start: before a new `scaler serve` reports ready, it lists the ScaledObjects whose
//! trigger names it (the rule `scaler status` uses: [`crate::scaledobject`]) and evaluates them
//! the way a refresh tick does ([`Cache::prime`]), so the first calls of a whole fleet (a rollout,
//! or KEDA restarting with the scaler) are answered from memory instead of all arriving cold at
//! once. Keys are made as GetMetrics makes them ([`crate::grpc::key`]), so KEDA's calls find them.
//!
//! Best effort: a list that fails (RBAC, an API error, a cap) is logged and the scaler starts
//! cold, as it did without one. A ScaledObject that a call would refuse is left to that call.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::Value;
use tracing::{info, warn};

use crate::cache::{Cache, Evaluate};
use crate::list::{self, Caps, ListError};
use crate::parsed::{self, MetadataCache};
use crate::proto::ScaledObjectRef;
use crate::scaledobject::{self, AddressMatch};

/// Most ScaledObjects listed (all of the cluster's, ours or not).
const MAX_LISTED: usize = 1_000_000;
/// Largest page: 500 ScaledObjects of a few KiB each are about 2 MiB.
const MAX_PAGE_BYTES: usize = 32 * 1024 * 1024;
/// Most bytes of names and metadata kept from the list until the keys are made (50,000 typical
/// ScaledObjects hold about 12 MiB): a tenant's oversized metadata cannot grow the start.
const MAX_KEPT_BYTES: usize = 32 * 1024 * 1024;

/// Lists the ScaledObjects `rule` says are ours (at most `capacity` of them kept) and primes
/// `cache` with their keys; returns how many keys it holds.
pub async fn warm_start<E: Evaluate>(
    client: &kube::Client,
    rule: &AddressMatch,
    metadata: &MetadataCache,
    cache: &Cache<E>,
    capacity: usize,
) -> Result<usize, ListError> {
    let started = Instant::now();
    let (ours, kept_bytes) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let resource = scaledobject::resource();
    let path = kube::Api::<kube::api::DynamicObject>::all_with(client.clone(), &resource)
        .resource_url()
        .to_owned();
    let caps = Caps {
        items: MAX_LISTED,
        page_bytes: MAX_PAGE_BYTES,
    };
    // Projected as each item parses, and only ours up to the capacity and the byte budget: the
    // list itself is never held. Metadata too large to be kept parsed is left to its call.
    let refs = list::list(client, &path, None, caps, |object: Value| {
        let reference = reference(&object, rule)?;
        let bytes = size(&reference);
        let room = ours.fetch_add(1, Ordering::Relaxed) < capacity
            && bytes <= parsed::MAX_CACHED_BYTES
            && kept_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes <= MAX_KEPT_BYTES;
        room.then_some(reference)
    })
    .await?;
    let listed = started.elapsed();
    let ours = ours.into_inner();
    let mut keys = Vec::with_capacity(refs.len());
    for reference in refs {
        // Refused here as GetMetrics refuses it (logged, an Event for invalid metadata).
        if let Ok(key) = crate::grpc::key(metadata, Some(reference)).await {
            keys.push(key);
        }
    }
    let held = keys.len();
    // Refused, oversized, or past the byte budget: left to their calls.
    let skipped = ours.min(capacity) - held;
    let evaluated = cache.prime(keys).await;
    if ours > capacity {
        warn!(
            ours,
            capacity,
            "more ScaledObjects name this scaler than --max-cached-objects holds: the rest start cold"
        );
    }
    let seconds = started.elapsed().as_secs_f64();
    let listed_seconds = listed.as_secs_f64();
    // `evaluated` is short of `held` by the keys a caller evaluated first.
    info!(
        ours,
        skipped, held, evaluated, listed_seconds, seconds, "warm start"
    );
    Ok(held)
}

/// Bytes of a reference's names and metadata.
fn size(reference: &ScaledObjectRef) -> usize {
    let metadata = reference.scaler_metadata.iter();
    reference.name.len()
        + reference.namespace.len()
        + metadata.map(|(k, v)| k.len() + v.len()).sum::<usize>()
}

/// The reference KEDA sends for `object`, a ScaledObject as JSON, when one of its triggers
/// names this scaler.
fn reference(object: &Value, rule: &AddressMatch) -> Option<ScaledObjectRef> {
    let trigger = scaledobject::trigger(object, rule)?;
    let text = |pointer: &str| object.pointer(pointer)?.as_str().map(str::to_owned);
    Some(ScaledObjectRef {
        name: text("/metadata/name")?,
        namespace: text("/metadata/namespace")?,
        scaler_metadata: trigger.metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_scaledobject_naming_this_scaler_gives_the_reference_keda_sends() {
        let rule = AddressMatch(vec!["svc".into()]);
        let object = json!({
            "metadata": {"name": "db", "namespace": "tenant-a"},
            "spec": {"triggers": [{"type": "external", "metadata": {
                "scalerAddress": "svc.ns:6000", "cluster": "db", "target": "5"}}]},
        });
        let found = reference(&object, &rule).unwrap();
        assert_eq!(
            (found.name.as_str(), found.namespace.as_str()),
            ("db", "tenant-a")
        );
        assert_eq!(found.scaler_metadata.len(), 3);
        assert_eq!(found.scaler_metadata["cluster"], "db");
        assert_eq!(
            reference(&object, &AddressMatch(vec!["other".into()])),
            None
        );
        let unnamed = json!({"spec": object["spec"].clone()});
        assert_eq!(reference(&unnamed, &rule), None);
    }
}
