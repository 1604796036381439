//! The writes of one tenant move: the namespace label and every HelmRelease's shard key, each a
//! merge patch carrying the `resourceVersion` just read, so a write based on a stale read is
//! refused (409) instead of undoing someone else's change.
//!
//! Every release is read fresh first (full object: the status is what says an upgrade is
//! running; the watch is metadata-only) and checked with [`release_gate`]. A move writes
//! nothing unless every release may move; the namespace goes first, so releases created
//! meanwhile are stamped with the new shard by the webhook. A write that fails half-way leaves
//! the namespace on the new shard and the rest as stragglers, which the next sync heals.
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use placement::plan::{Blocked, ReleaseState, release_gate};
use placement::shard::{NAMESPACE_SHARD_LABEL, SHARD_KEY_LABEL, ShardIndex, shard_name};
use serde_json::{Value, json};
use tokio::time::timeout;
use tracing::debug;

/// Attempts per release: a 409 usually means helm-controller just wrote the status; re-read,
/// re-check and try again.
const WRITE_ATTEMPTS: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a call.
    #[error("{action} {object}: {source}")]
    Api {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    /// A call took longer than `--api-timeout`.
    #[error("{action} {object}: no answer within {timeout:?}")]
    Timeout {
        action: &'static str,
        object: String,
        timeout: Duration,
    },
}

/// A HelmRelease of the tenant being relabelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRef {
    pub namespace: String,
    pub name: String,
}

/// A whole tenant or nothing (a move), or each release on its own (healing stragglers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Move,
    Heal,
}

/// What the shards reconcile now, for [`release_gate`].
#[derive(Debug, Clone)]
pub struct Gate {
    pub live: BTreeSet<ShardIndex>,
    pub shard_count: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Labels written: the namespace (when it exists and differed) and `releases` releases;
    /// `skipped` releases were left as stragglers (blocked, heal mode).
    Relabelled {
        namespace: bool,
        releases: usize,
        skipped: usize,
    },
    /// Everything already carried the target (e.g. another leader moved it).
    AlreadyThere,
    /// A release may not move now; nothing was written.
    Blocked(Blocked),
    /// The namespace changed since it was read; nothing was written.
    Conflict,
}

pub struct Relabeler {
    client: Client,
    namespaces: Api<Namespace>,
    helmreleases: ApiResource,
    api_timeout: Duration,
}

/// A release as just read.
struct Read {
    release: ReleaseRef,
    key: Option<String>,
    resource_version: Option<String>,
    state: ReleaseState,
}

impl Relabeler {
    pub fn new(client: Client, helmreleases: ApiResource, api_timeout: Duration) -> Self {
        Self {
            namespaces: Api::all(client.clone()),
            client,
            helmreleases,
            api_timeout,
        }
    }

    /// Puts `tenant` (its namespace and `releases`) on shard `to`.
    pub async fn relabel(
        &self,
        tenant: &str,
        releases: &[ReleaseRef],
        to: ShardIndex,
        gate: &Gate,
        mode: Mode,
    ) -> Result<Outcome, Error> {
        let target = shard_name(to);
        let mut pending = Vec::new();
        let mut skipped = 0;
        for release in releases {
            let Some(read) = self.read(release).await? else {
                continue;
            };
            match (check(&read, gate), mode) {
                (Err(blocked), Mode::Move) => return Ok(Outcome::Blocked(blocked)),
                (Err(_), Mode::Heal) => skipped += 1,
                (Ok(()), _) if read.key.as_deref() == Some(target.as_str()) => {}
                (Ok(()), _) => pending.push(read),
            }
        }

        let mut namespace = false;
        if let Some(ns) = self
            .call("read", tenant, self.namespaces.get_opt(tenant))
            .await?
        {
            if ns.metadata.deletion_timestamp.is_some() && mode == Mode::Move {
                return Ok(Outcome::Blocked(Blocked::Deleting));
            }
            if ns.labels().get(NAMESPACE_SHARD_LABEL) != Some(&target) {
                let body = label_patch(NAMESPACE_SHARD_LABEL, &target, ns.resource_version());
                let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
                let write = self.namespaces.patch(tenant, &params, &patch);
                match timeout(self.api_timeout, write).await {
                    Ok(Ok(_)) => namespace = true,
                    Ok(Err(kube::Error::Api(s))) if s.is_conflict() => {
                        return Ok(Outcome::Conflict);
                    }
                    Ok(Err(source)) => return Err(api_error("label namespace", tenant, source)),
                    Err(_) => return Err(self.timed_out("label namespace", tenant)),
                }
            }
        }

        let mut written = 0;
        for read in pending {
            match self.write_release(read, &target, gate).await? {
                Some(true) => written += 1,
                Some(false) => {}
                None => skipped += 1,
            }
        }
        Ok(if !namespace && written == 0 && skipped == 0 {
            Outcome::AlreadyThere
        } else {
            Outcome::Relabelled {
                namespace,
                releases: written,
                skipped,
            }
        })
    }

    /// Writes one release's key, re-reading on conflict. `Some(true)` written, `Some(false)`
    /// nothing to do (gone, or already there), `None` left as a straggler (blocked meanwhile,
    /// or still conflicting).
    async fn write_release(
        &self,
        mut read: Read,
        target: &str,
        gate: &Gate,
    ) -> Result<Option<bool>, Error> {
        let object = format!("{}/{}", read.release.namespace, read.release.name);
        for _ in 0..WRITE_ATTEMPTS {
            let body = label_patch(SHARD_KEY_LABEL, target, read.resource_version.clone());
            let api = self.api(&read.release.namespace);
            let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
            let write = api.patch(&read.release.name, &params, &patch);
            match timeout(self.api_timeout, write).await {
                Ok(Ok(_)) => return Ok(Some(true)),
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => return Ok(Some(false)),
                Ok(Err(kube::Error::Api(s))) if s.is_conflict() => {
                    debug!(release = %object, "release changed while relabelling; re-reading");
                }
                Ok(Err(source)) => return Err(api_error("label release", &object, source)),
                Err(_) => return Err(self.timed_out("label release", &object)),
            }
            read = match self.read(&read.release).await? {
                None => return Ok(Some(false)),
                Some(again) if check(&again, gate).is_err() => return Ok(None),
                Some(again) if again.key.as_deref() == Some(target) => return Ok(Some(false)),
                Some(again) => again,
            };
        }
        Ok(None)
    }

    async fn read(&self, release: &ReleaseRef) -> Result<Option<Read>, Error> {
        let object = format!("{}/{}", release.namespace, release.name);
        let api = self.api(&release.namespace);
        let Some(hr) = self
            .call("read", &object, api.get_opt(&release.name))
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(Read {
            key: hr.labels().get(SHARD_KEY_LABEL).cloned(),
            resource_version: hr.resource_version(),
            state: release_state(&hr),
            release: release.clone(),
        }))
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &self.helmreleases)
    }

    async fn call<T>(
        &self,
        action: &'static str,
        object: &str,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Error> {
        match timeout(self.api_timeout, call).await {
            Ok(result) => result.map_err(|source| api_error(action, object, source)),
            Err(_) => Err(self.timed_out(action, object)),
        }
    }

    fn timed_out(&self, action: &'static str, object: &str) -> Error {
        Error::Timeout {
            action,
            object: object.to_owned(),
            timeout: self.api_timeout,
        }
    }
}

fn api_error(action: &'static str, object: &str, source: kube::Error) -> Error {
    Error::Api {
        action,
        object: object.to_owned(),
        source,
    }
}

fn check(read: &Read, gate: &Gate) -> Result<(), Blocked> {
    release_gate(
        read.key.as_deref(),
        read.state,
        &gate.live,
        gate.shard_count,
    )
}

/// `{"metadata": {"resourceVersion": rv, "labels": {key: value}}}`: the resourceVersion makes the
/// merge patch conditional (409 when the object changed since it was read).
fn label_patch(key: &str, value: &str, resource_version: Option<String>) -> Value {
    json!({"metadata": {"resourceVersion": resource_version, "labels": {key: value}}})
}

/// Deleting, or mid install/upgrade: helm-controller marks Ready `Unknown` and Reconciling
/// `True` while it acts on a release.
pub fn release_state(hr: &DynamicObject) -> ReleaseState {
    let conditions = hr.data["status"]["conditions"].as_array();
    let has = |kind: &str, status: &str| {
        conditions.is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == kind && c["status"] == status)
        })
    };
    ReleaseState {
        deleting: hr.metadata.deletion_timestamp.is_some(),
        in_progress: has("Ready", "Unknown") || has("Reconciling", "True"),
    }
}

#[cfg(test)]
#[path = "relabel_tests.rs"]
mod tests;
