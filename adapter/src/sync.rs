//! One sync of every adapter (the I/O around [`crate::decide`]): read each target, decide,
//! patch the count under [`FIELD_MANAGER`] (a merge patch conditional on the version read, which
//! never creates a target), write the status when it changed. Each
//! API call has a deadline and at most `concurrency` adapters are in flight, so a slow API
//! server or many adapters cannot stall or flood it.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{Mutex, watch};
use tokio::time::timeout;
use tracing::{info, warn};

use crate::crd::ScaleAdapter;
use crate::decide::{Action, Blocked, Input, Verdict, decide};
use crate::metrics::Metrics;
use crate::status::{self, Report};
use crate::target::{self, Claim, Target, TargetKey};

/// The field manager of every write: the target's count and the adapter's status.
pub const FIELD_MANAGER: &str = "cozy-scale-adapter";

#[derive(Debug, Clone)]
pub struct Settings {
    pub min_interval: Duration,
    pub api_timeout: Duration,
    pub concurrency: usize,
}

/// A target as read: where it is, and the version a write is conditional on.
struct Read {
    api: Api<DynamicObject>,
    target: Target,
    resource_version: String,
}

pub struct Syncer {
    client: Client,
    settings: Settings,
    metrics: Metrics,
    /// Whether this replica holds the Lease (`runtime::lease`), checked before each write.
    leader: watch::Receiver<bool>,
    /// Resolved kinds; one discovery call per kind, retried while it fails.
    kinds: Mutex<HashMap<GroupVersionKind, ApiResource>>,
    /// When each adapter (namespace, name) last wrote, by this process.
    writes: Mutex<HashMap<(String, String), Timestamp>>,
    /// The decode error last logged for each adapter that does not decode: logged once per
    /// change, not every sync.
    malformed: Mutex<HashMap<(String, String), String>>,
}

impl Syncer {
    pub fn new(
        client: Client,
        settings: Settings,
        metrics: Metrics,
        leader: watch::Receiver<bool>,
    ) -> Self {
        Self {
            client,
            settings,
            metrics,
            leader,
            kinds: Mutex::default(),
            writes: Mutex::default(),
            malformed: Mutex::default(),
        }
    }

    /// Syncs every adapter in `adapters` (the reflector's snapshot) as the leader. A lead lost
    /// meanwhile stops the sync at once (the calls in flight are dropped) and zeroes the leader
    /// gauge; each write checks the lead first, so none starts after the loss.
    pub async fn sync(&self, adapters: Vec<Arc<DynamicObject>>) {
        let mut lead = self.leader.clone();
        tokio::select! {
            biased;
            // An error: the campaign ended (shutdown), which is no lead either.
            _ = lead.wait_for(|leading| !leading) => {
                self.metrics.leader.set(0);
                warn!("lost the Lease: sync stopped, nothing more is written");
            }
            () = self.sync_all(adapters) => {}
        }
    }

    fn leading(&self) -> bool {
        *self.leader.borrow()
    }

    /// Syncs the objects that decode, and reports each one that does not on itself.
    async fn sync_all(&self, objects: Vec<Arc<DynamicObject>>) {
        let mut adapters = Vec::new();
        let mut malformed = HashMap::new();
        for object in &objects {
            match crate::crd::decode(object) {
                Ok(adapter) => adapters.push(adapter),
                Err(message) => {
                    let key = (object.namespace().unwrap_or_default(), object.name_any());
                    malformed.insert(key, (object, message));
                }
            }
        }
        self.malformed
            .lock()
            .await
            .retain(|k, _| malformed.contains_key(k));
        let targets: Vec<_> = adapters.iter().map(|a| target::validate(&a.spec)).collect();
        let claims = adapters
            .iter()
            .zip(&targets)
            .filter_map(|(a, t)| {
                let t = t.as_ref().ok()?;
                let namespace = a.namespace()?;
                Some((
                    TargetKey {
                        namespace: namespace.clone(),
                        group: t.gvk.group.clone(),
                        kind: t.gvk.kind.clone(),
                        name: a.spec.target_ref.name.clone(),
                    },
                    Claim {
                        created: a
                            .creation_timestamp()
                            .map(|t| t.0.to_string())
                            .unwrap_or_default(),
                        namespace,
                        name: a.name_any(),
                    },
                ))
            })
            .collect();
        let losers = target::losers(claims);
        let live: std::collections::HashSet<_> = objects
            .iter()
            .map(|a| (a.namespace().unwrap_or_default(), a.name_any()))
            .collect();
        self.writes.lock().await.retain(|k, _| live.contains(k));
        let mut blocked: BTreeMap<&'static str, i64> = BTreeMap::new();
        let reasons: Vec<_> = stream::iter(adapters.iter().zip(targets))
            .map(|(adapter, target)| {
                let key = (adapter.namespace().unwrap_or_default(), adapter.name_any());
                let conflict = losers.get(&key).cloned();
                self.sync_one(adapter, target, conflict)
            })
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await;
        let unread: Vec<_> = stream::iter(malformed)
            .map(|(key, (object, message))| self.report_malformed(key, object, message))
            .buffer_unordered(self.settings.concurrency)
            .collect()
            .await;
        for reason in reasons.into_iter().chain(unread).flatten() {
            *blocked.entry(reason).or_default() += 1;
        }
        self.metrics.set_unsynced(&blocked);
    }

    /// Returns the reason when the adapter is not synced.
    async fn sync_one(
        &self,
        adapter: &ScaleAdapter,
        target: Result<Target, String>,
        conflict: Option<String>,
    ) -> Option<&'static str> {
        let namespace = adapter.namespace()?;
        let name = adapter.name_any();
        let key = (namespace.clone(), name.clone());
        let selector = target.as_ref().ok().map(|t| t.selector.clone());
        let current = match (target, conflict) {
            (Err(message), _) => Err(Blocked::InvalidSpec(message)),
            (Ok(_), Some(owner)) => Err(Blocked::Conflict(owner)),
            (Ok(target), None) => self.read(&namespace, adapter, &target).await,
        };
        let stored = adapter.status.as_ref();
        let last_write = {
            let writes = self.writes.lock().await;
            writes.get(&key).copied().max(status::last_write(stored))
        };
        let now = Timestamp::now();
        let decision = decide(&Input {
            desired: adapter.spec.replicas,
            paused: adapter.spec.paused,
            current: current.as_ref().map(|(n, _)| *n).map_err(Clone::clone),
            last_write,
            now,
            min_interval: self.settings.min_interval,
        });
        let mut replicas = decision.replicas;
        let mut verdict = decision.verdict;
        let mut last_write = last_write;
        if let (Action::Write(n), Ok((_, read))) = (&decision.action, &current) {
            if !self.leading() {
                return None;
            }
            match self.write(read, &adapter.spec.target_ref.name, *n).await {
                Ok(written) => {
                    self.writes.lock().await.insert(key, now);
                    last_write = Some(now);
                    self.metrics.writes.inc();
                    info!(%namespace, adapter = %name, target = %adapter.spec.target_ref.name, from = ?replicas, to = n, "wrote the target's count");
                    replicas = Some(written);
                    verdict = Verdict {
                        synced: written == *n,
                        reason: if written == *n {
                            "Synced"
                        } else {
                            "NotApplied"
                        },
                        message: format!("wrote {n}; the target has {written}"),
                    };
                }
                Err(blocked) => {
                    warn!(%namespace, adapter = %name, reason = blocked.reason(), message = %blocked.message(), "cannot write the target");
                    verdict = Verdict {
                        synced: false,
                        reason: blocked.reason(),
                        message: blocked.message(),
                    };
                }
            }
        }
        self.report(
            &namespace,
            &name,
            &Report {
                previous: stored,
                generation: adapter.metadata.generation,
                replicas,
                selector: selector.as_deref(),
                verdict: &verdict,
                last_write,
                now,
            },
        )
        .await;
        (!verdict.synced).then_some(verdict.reason)
    }

    /// Reports an object that does not decode on itself (reason `Malformed`, the field named),
    /// logging it once per change of its error; nothing else about it is read or written.
    async fn report_malformed(
        &self,
        (namespace, name): (String, String),
        object: &DynamicObject,
        message: String,
    ) -> Option<&'static str> {
        let key = (namespace.clone(), name.clone());
        let before = self.malformed.lock().await.insert(key, message.clone());
        let changed = before.as_ref() != Some(&message);
        if changed {
            warn!(%namespace, adapter = %name, %message, "the ScaleAdapter does not decode; it is not synced");
        }
        // What of the stored status still decodes: the pacing and the transition time carry on.
        let stored = object
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let verdict = Verdict {
            synced: false,
            reason: "Malformed",
            message,
        };
        self.report(
            &namespace,
            &name,
            &Report {
                previous: stored.as_ref(),
                generation: object.metadata.generation,
                replicas: None,
                selector: None,
                verdict: &verdict,
                last_write: status::last_write(stored.as_ref()),
                now: Timestamp::now(),
            },
        )
        .await;
        Some(verdict.reason)
    }

    /// Writes the status a report makes, when it differs from the stored one.
    async fn report(&self, namespace: &str, name: &str, report: &Report<'_>) {
        let next = status::status(report);
        if report.previous != Some(&next) {
            self.write_status(namespace, name, &next).await;
        }
    }

    /// The target's count, and what is needed to write it.
    async fn read(
        &self,
        namespace: &str,
        adapter: &ScaleAdapter,
        target: &Target,
    ) -> Result<(i32, Read), Blocked> {
        let resource = self.resolve(&target.gvk).await?;
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &resource);
        let object = self
            .call(api.get_opt(&adapter.spec.target_ref.name))
            .await?
            .ok_or(Blocked::TargetMissing)?;
        let resource_version = object
            .resource_version()
            .ok_or_else(|| Blocked::Api("the target was read without a resourceVersion".into()))?;
        let value = serde_json::to_value(&object).map_err(|e| Blocked::Api(e.to_string()))?;
        crate::target::check_object(&target.gvk, &value).map_err(Blocked::TargetRefused)?;
        let count = target.path.read(&value).map_err(Blocked::Read)?;
        let read = Read {
            api,
            target: target.clone(),
            resource_version,
        };
        Ok((count, read))
    }

    async fn resolve(&self, gvk: &GroupVersionKind) -> Result<ApiResource, Blocked> {
        if let Some(resource) = self.kinds.lock().await.get(gvk) {
            return Ok(resource.clone());
        }
        let (resource, caps) = self
            .call(discovery::pinned_kind(&self.client, gvk))
            .await
            .map_err(|b| match b {
                Blocked::TargetMissing => Blocked::KindUnknown(format!(
                    "the API server serves no {}/{} {}: install its CRD",
                    gvk.group, gvk.version, gvk.kind
                )),
                other => other,
            })?;
        if caps.scope != Scope::Namespaced {
            return Err(Blocked::InvalidSpec(format!(
                "targetRef.kind {} is cluster-scoped: only objects in the adapter's namespace are driven",
                gvk.kind
            )));
        }
        self.kinds
            .lock()
            .await
            .insert(gvk.clone(), resource.clone());
        Ok(resource)
    }

    /// Patches the count into the target as read; returns the count the answer holds. A target
    /// deleted since (404) is `TargetMissing`, one changed or recreated (409) `TargetChanged`:
    /// a server-side apply would have created a skeleton target in the first case.
    async fn write(&self, read: &Read, name: &str, replicas: i32) -> Result<i32, Blocked> {
        let patch = read
            .target
            .path
            .merge_patch(&read.resource_version, replicas);
        // An update takes the field over from whoever set it (as the HPA owns a Deployment's
        // replicas); a chart still setting it would flip it back (docs/scale-adapter.md).
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let written = self
            .call(read.api.patch(name, &params, &Patch::Merge(&patch)))
            .await?;
        let value = serde_json::to_value(&written).map_err(|e| Blocked::Api(e.to_string()))?;
        read.target.path.read(&value).map_err(Blocked::Read)
    }

    async fn write_status(
        &self,
        namespace: &str,
        name: &str,
        next: &crate::crd::ScaleAdapterStatus,
    ) {
        if !self.leading() {
            return;
        }
        // Untyped: the answer of an object that does not decode must not fail (kube logs the
        // whole body of an answer it cannot decode).
        let api = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            namespace,
            &ApiResource::erase::<ScaleAdapter>(&()),
        );
        let body = json!({
            "apiVersion": "autoscaling.cozystack.io/v1alpha1",
            "kind": "ScaleAdapter",
            "metadata": {"name": name},
            "status": next,
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if let Err(blocked) = self
            .call(api.patch_status(name, &params, &Patch::Apply(&body)))
            .await
        {
            warn!(%namespace, adapter = %name, message = %blocked.message(), "cannot write the status");
        }
    }

    /// One API call with the deadline; 404 is `TargetMissing` (callers rename it), 403
    /// `Forbidden`, 409 (a precondition failed) `TargetChanged`.
    async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, Blocked> {
        match timeout(self.settings.api_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(kube::Error::Api(s))) if s.code == 403 => {
                Err(Blocked::Forbidden(names::echo(&s.message)))
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Err(Blocked::TargetMissing),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Err(Blocked::TargetChanged),
            Ok(Err(kube::Error::Discovery(e))) => Err(Blocked::KindUnknown(e.to_string())),
            Ok(Err(e)) => Err(Blocked::Api(names::echo(&e.to_string()))),
            Err(_) => Err(Blocked::Api(format!(
                "no answer within {:?}",
                self.settings.api_timeout
            ))),
        }
    }
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
