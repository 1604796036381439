//! The tenant-quota ceiling: how many more CNPG instances a namespace's ResourceQuotas fit.
//!
//! Pure arithmetic, exact in integer milli-units (no floating point, so `2 × 500m` fits `1`).
//! One instance costs one pod (its container resources), one PVC (two with WAL storage) and its
//! storage requests; for each quota and resource, `more = floor((hard − used) / cost)`, and the
//! smallest wins. Requests default to limits when only limits are set, as the API server does.
//! Quotas with scopes are ignored (their selection of pods is not modelled), and so are resources
//! an instance does not use (cost 0 or unset; a LimitRange default is not read). An unscoped quota
//! that cannot be read fits nothing: growth is held (what it allows is unknown), never unguarded.
use std::collections::BTreeMap;

use serde::Serialize;

/// Kept under its first home's name for the crate's users.
pub use crate::quantity::Milli;
use crate::quantity::{Rounding, parse_quantity};

/// What one more instance of the Cluster costs, from its spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct InstanceCost {
    pub requests_cpu: Option<Milli>,
    pub limits_cpu: Option<Milli>,
    pub requests_memory: Option<Milli>,
    pub limits_memory: Option<Milli>,
    /// `storage.size` + `walStorage.size`.
    pub storage: Option<Milli>,
    /// 1, or 2 with WAL storage.
    pub pvcs: u32,
}

impl InstanceCost {
    /// The cost of one instance in a quota resource; `None` when the instance does not use it.
    fn of(&self, resource: Resource) -> Option<Milli> {
        let units = |n: u32| Some(Milli(i128::from(n) * 1000));
        match resource {
            Resource::Pods => units(1),
            Resource::Pvcs => units(self.pvcs),
            Resource::RequestsCpu => self.requests_cpu.or(self.limits_cpu),
            Resource::LimitsCpu => self.limits_cpu,
            Resource::RequestsMemory => self.requests_memory.or(self.limits_memory),
            Resource::LimitsMemory => self.limits_memory,
            Resource::RequestsStorage => self.storage,
        }
        .filter(|cost| cost.0 > 0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Pods,
    Pvcs,
    RequestsCpu,
    LimitsCpu,
    RequestsMemory,
    LimitsMemory,
    RequestsStorage,
}

/// Quota keys an instance consumes, and what they measure (`cpu`/`memory` mean requests).
const RESOURCES: [(&str, Resource); 11] = [
    ("pods", Resource::Pods),
    ("count/pods", Resource::Pods),
    ("persistentvolumeclaims", Resource::Pvcs),
    ("count/persistentvolumeclaims", Resource::Pvcs),
    ("requests.cpu", Resource::RequestsCpu),
    ("cpu", Resource::RequestsCpu),
    ("limits.cpu", Resource::LimitsCpu),
    ("requests.memory", Resource::RequestsMemory),
    ("memory", Resource::RequestsMemory),
    ("limits.memory", Resource::LimitsMemory),
    ("requests.storage", Resource::RequestsStorage),
];

/// One ResourceQuota's hard limits and usage, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quota {
    pub name: String,
    /// `spec.scopes` or `spec.scopeSelector` set: not applied (see the module docs).
    pub scoped: bool,
    pub hard: BTreeMap<String, Milli>,
    /// `status.used`; `None` until the quota controller has computed it.
    pub used: Option<BTreeMap<String, Milli>>,
    /// Why the quota could not be read (a quantity that does not parse); it then holds growth.
    pub unreadable: Option<String>,
}

impl Quota {
    /// Parses `hard` and `used` (key → quantity text); capacities round down, usage up.
    pub fn parse<'a>(
        name: &str,
        scoped: bool,
        hard: impl IntoIterator<Item = (&'a str, &'a str)>,
        used: Option<impl IntoIterator<Item = (&'a str, &'a str)>>,
    ) -> Result<Self, String> {
        let read = |pairs: Vec<(&str, &str)>, rounding| {
            pairs
                .into_iter()
                .filter(|(key, _)| RESOURCES.iter().any(|(k, _)| k == key))
                .map(|(key, value)| {
                    parse_quantity(value, rounding)
                        .map(|q| (key.to_owned(), q))
                        .map_err(|e| format!("ResourceQuota {name}: {key}: {e}"))
                })
                .collect::<Result<BTreeMap<_, _>, _>>()
        };
        Ok(Self {
            name: name.to_owned(),
            scoped,
            hard: read(hard.into_iter().collect(), Rounding::Down)?,
            used: used
                .map(|u| read(u.into_iter().collect(), Rounding::Up))
                .transpose()?,
            unreadable: None,
        })
    }

    /// A quota that could not be read, and why: it fits no more instances.
    pub fn unreadable(name: &str, scoped: bool, error: String) -> Self {
        Self {
            name: name.to_owned(),
            scoped,
            hard: BTreeMap::new(),
            used: None,
            unreadable: Some(error),
        }
    }
}

/// [`Fit::resource`] of a quota that could not be read.
pub const UNREADABLE: &str = "unreadable";

/// The binding limit: how many more instances fit, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fit {
    /// More instances that fit (beyond those that exist).
    pub more: u32,
    /// The quota key, e.g. `requests.cpu`.
    pub resource: &'static str,
    pub quota: String,
    pub hard: Milli,
    /// `None` when the quota has no usage yet (the API server then admits nothing).
    pub used: Option<Milli>,
    /// One instance's cost in this resource.
    pub cost: Milli,
    /// Why the binding quota could not be read (then `more` is 0 and `resource` [`UNREADABLE`]).
    pub unreadable: Option<String>,
}

/// The tightest limit over every unscoped quota and resource an instance uses; `None` when no
/// quota limits anything an instance consumes. An unscoped quota that cannot be read binds first.
pub fn tightest(quotas: &[Quota], cost: &InstanceCost) -> Option<Fit> {
    let unscoped = || quotas.iter().filter(|q| !q.scoped);
    if let Some((quota, error)) =
        unscoped().find_map(|q| q.unreadable.as_ref().map(|error| (q, error)))
    {
        return Some(Fit {
            more: 0,
            resource: UNREADABLE,
            quota: quota.name.clone(),
            hard: Milli(0),
            used: None,
            cost: Milli(0),
            unreadable: Some(error.clone()),
        });
    }
    let mut best: Option<Fit> = None;
    for quota in unscoped() {
        for (key, resource) in RESOURCES {
            let (Some(hard), Some(per_instance)) = (quota.hard.get(key), cost.of(resource)) else {
                continue;
            };
            let used = quota
                .used
                .as_ref()
                .map(|u| u.get(key).copied().unwrap_or_default());
            let more = match used {
                None => 0,
                Some(used) => {
                    let room = (hard.0 - used.0).max(0) / per_instance.0;
                    u32::try_from(room).unwrap_or(u32::MAX)
                }
            };
            if best.as_ref().is_none_or(|b| more < b.more) {
                best = Some(Fit {
                    more,
                    resource: key,
                    quota: quota.name.clone(),
                    hard: *hard,
                    used,
                    cost: per_instance,
                    unreadable: None,
                });
            }
        }
    }
    best
}

#[cfg(test)]
#[path = "quota_tests.rs"]
mod tests;
