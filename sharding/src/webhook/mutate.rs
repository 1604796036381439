//! The pure admission decision: which reviews concern us, and the JSON Patch that stamps a
//! HelmRelease with its tenant's shard. No I/O: the shell resolves the tenant's shard in
//! between ([`admit`] → [`Pending::finish`]).
use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::ByteString;
use placement::shard::{SHARD_KEY_LABEL, ShardIndex, shard_name};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::review::{AdmissionRequest, AdmissionResponse};
use crate::watch::{HELMRELEASE_GROUP, HELMRELEASE_KIND, HELMRELEASE_VERSION};

/// Why a review ended the way it did; one bounded label value per variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Patched with the tenant's shard.
    Stamped,
    /// Already carried the tenant's shard.
    AlreadyStamped,
    /// UPDATE, DELETE or CONNECT.
    NotCreate,
    /// Another kind or another version.
    NotHelmRelease,
    /// The object or its metadata could not be read.
    MalformedObject,
    /// Namespace not `tenant-*`.
    NotTenant,
    /// A namespace, name or derived tenant that is not a valid Kubernetes name.
    InvalidName,
    /// The watch caches have not synced yet.
    NotSynced,
    /// No shard `< K` is ready to take a new tenant.
    NoReadyShard,
    /// A Kubernetes API call failed.
    ApiError,
    /// The shard could not be resolved within the admission deadline.
    Timeout,
}

impl Reason {
    pub const ALL: [Reason; 11] = [
        Reason::Stamped,
        Reason::AlreadyStamped,
        Reason::NotCreate,
        Reason::NotHelmRelease,
        Reason::MalformedObject,
        Reason::NotTenant,
        Reason::InvalidName,
        Reason::NotSynced,
        Reason::NoReadyShard,
        Reason::ApiError,
        Reason::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Stamped => "stamped",
            Reason::AlreadyStamped => "already_stamped",
            Reason::NotCreate => "not_create",
            Reason::NotHelmRelease => "not_helmrelease",
            Reason::MalformedObject => "malformed_object",
            Reason::NotTenant => "not_tenant",
            Reason::InvalidName => "invalid_name",
            Reason::NotSynced => "not_synced",
            Reason::NoReadyShard => "no_ready_shard",
            Reason::ApiError => "api_error",
            Reason::Timeout => "timeout",
        }
    }
}

/// The reply to one review and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub response: AdmissionResponse,
    pub reason: Reason,
}

/// A tenant HelmRelease CREATE waiting for its tenant's shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    uid: String,
    /// The tenant namespace the release is attributed to.
    pub tenant: String,
    /// The release's own namespace and name, for logs.
    pub namespace: String,
    pub name: String,
    /// Dry-run requests must not record anything.
    pub dry_run: bool,
    labels: Option<BTreeMap<String, String>>,
}

/// First half of the decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Admit {
    /// Allowed unchanged, no shard needed.
    Done(Outcome),
    /// A tenant HelmRelease CREATE: resolve the tenant's shard, then [`Pending::finish`].
    NeedsShard(Pending),
}

/// Reads a review: only CREATE of `helm.toolkit.fluxcd.io/v2` HelmReleases in tenant
/// namespaces need a shard; everything else is allowed unchanged.
pub fn admit(req: &AdmissionRequest) -> Admit {
    let done = |reason| {
        Admit::Done(Outcome {
            response: AdmissionResponse::allow(&req.uid),
            reason,
        })
    };
    if req.operation != "CREATE" {
        return done(Reason::NotCreate);
    }
    let kind = &req.kind;
    if (
        kind.group.as_str(),
        kind.version.as_str(),
        kind.kind.as_str(),
    ) != (HELMRELEASE_GROUP, HELMRELEASE_VERSION, HELMRELEASE_KIND)
    {
        return done(Reason::NotHelmRelease);
    }
    let Some(meta) = req.object.as_deref().and_then(ObjectMeta::read) else {
        return done(Reason::MalformedObject);
    };
    // On CREATE the object may omit its namespace; the request always carries it.
    let namespace = meta
        .namespace
        .or_else(|| req.namespace.clone())
        .unwrap_or_default();
    // Empty while the API server has yet to resolve a generateName.
    let name = meta.name.or_else(|| req.name.clone()).unwrap_or_default();
    // Names go into API paths, the index and logs: only names the API server itself accepts.
    if !names::is_dns_label(&namespace) || !(name.is_empty() || names::is_dns_subdomain(&name)) {
        return done(Reason::InvalidName);
    }
    let empty = BTreeMap::new();
    let labels = meta.labels.as_ref().unwrap_or(&empty);
    match placement::tenant_namespace_for_hr(&namespace, &name, labels) {
        None => done(Reason::NotTenant),
        // A child tenant's namespace is composed; it may be too long to exist.
        Some(tenant) if !names::is_dns_label(&tenant) => done(Reason::InvalidName),
        Some(tenant) => Admit::NeedsShard(Pending {
            uid: req.uid.clone(),
            tenant,
            namespace,
            name,
            dry_run: req.dry_run.unwrap_or(false),
            labels: meta.labels,
        }),
    }
}

impl Pending {
    /// Second half: stamp `shard`, or allow unchanged when it could not be resolved.
    pub fn finish(self, shard: Result<ShardIndex, Reason>) -> Outcome {
        let mut response = AdmissionResponse::allow(&self.uid);
        let shard = match shard {
            Ok(shard) => shard,
            Err(reason) => return Outcome { response, reason },
        };
        let value = shard_name(shard);
        let current = self.labels.as_ref().and_then(|l| l.get(SHARD_KEY_LABEL));
        if current == Some(&value) {
            return Outcome {
                response,
                reason: Reason::AlreadyStamped,
            };
        }
        let patch = stamp_patch(self.labels.is_some(), &value);
        match serde_json::to_vec(&patch) {
            Ok(bytes) => {
                response.patch = Some(ByteString(bytes));
                response.patch_type = Some("JSONPatch");
                Outcome {
                    response,
                    reason: Reason::Stamped,
                }
            }
            // A Patch of strings always serialises; never block the object if it somehow does not.
            Err(_) => Outcome {
                response,
                reason: Reason::MalformedObject,
            },
        }
    }
}

/// The patch setting `metadata.labels["sharding.fluxcd.io/key"] = value`. JSON Patch `add`
/// needs an existing parent, so a missing labels map is added whole.
pub fn stamp_patch(has_labels: bool, value: &str) -> Patch {
    let op = if has_labels {
        AddOperation {
            path: PointerBuf::from_tokens(["metadata", "labels", SHARD_KEY_LABEL]),
            value: Value::String(value.to_owned()),
        }
    } else {
        let labels =
            Map::from_iter([(SHARD_KEY_LABEL.to_owned(), Value::String(value.to_owned()))]);
        AddOperation {
            path: PointerBuf::from_tokens(["metadata", "labels"]),
            value: Value::Object(labels),
        }
    };
    Patch(vec![PatchOperation::Add(op)])
}

/// The metadata fields the decision reads. `None` from [`ObjectMeta::read`] means malformed.
struct ObjectMeta {
    namespace: Option<String>,
    name: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

/// The object, of which only `metadata` is parsed; every other field is skipped unparsed.
#[derive(Deserialize)]
struct ObjectHead {
    metadata: RawMeta,
}

#[derive(Deserialize)]
struct RawMeta {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

impl ObjectMeta {
    fn read(object: &RawValue) -> Option<Self> {
        let head: ObjectHead = serde_json::from_str(object.get()).ok()?;
        let text = |s: Option<String>| s.filter(|s| !s.is_empty());
        Some(Self {
            namespace: text(head.metadata.namespace),
            name: text(head.metadata.name),
            labels: head.metadata.labels,
        })
    }
}

#[cfg(test)]
#[path = "mutate_tests.rs"]
mod tests;
