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
use std::fmt;

use serde::Serialize;

/// A quantity in milli-units (1 = 0.001 of the unit: millicores, millibytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Milli(pub i128);

impl fmt::Display for Milli {
    /// Whole units when exact, else millis (`500m`), like `kubectl`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

/// Which way a value finer than a milli-unit is rounded: costs up, capacities down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    Up,
    Down,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a Kubernetes quantity (e.g. 500m, 2, 1.5Gi, 1e3)")]
    Syntax(String),
    #[error("{0:?} is negative; quota and resource quantities are not")]
    Negative(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Longest quantity text read: the API server's canonical forms are far shorter.
const MAX_QUANTITY_LEN: usize = 64;
/// Most significant digits kept exact (i128 holds 38).
const MAX_DIGITS: usize = 30;

/// Parses a Kubernetes quantity (`<number><suffix>`: binary `Ki`…`Ei`, decimal `n u m k M G T P E`,
/// or an exponent `e3`/`E-2`) into milli-units.
pub fn parse_quantity(text: &str, rounding: Rounding) -> Result<Milli, QuantityError> {
    let syntax = || QuantityError::Syntax(text.chars().take(MAX_QUANTITY_LEN).collect());
    if text.len() > MAX_QUANTITY_LEN {
        return Err(syntax());
    }
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(syntax());
    }
    let digits = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    if significant.len() > MAX_DIGITS {
        return Err(QuantityError::TooLarge(text.into()));
    }
    let mantissa: i128 = if significant.is_empty() {
        0
    } else {
        significant.parse().map_err(|_| syntax())?
    };
    // value = mantissa × base^power × 10^-fraction_digits
    let (base, power): (i128, i32) = match suffix {
        "" => (10, 0),
        "n" => (10, -9),
        "u" => (10, -6),
        "m" => (10, -3),
        "k" => (10, 3),
        "M" => (10, 6),
        "G" => (10, 9),
        "T" => (10, 12),
        "P" => (10, 15),
        "E" => (10, 18),
        "Ki" => (1024, 1),
        "Mi" => (1024, 2),
        "Gi" => (1024, 3),
        "Ti" => (1024, 4),
        "Pi" => (1024, 5),
        "Ei" => (1024, 6),
        exponent => {
            let digits = exponent
                .strip_prefix(['e', 'E'])
                .filter(|d| !d.is_empty())
                .ok_or_else(syntax)?;
            let power: i32 = digits.parse().map_err(|_| syntax())?;
            if !(-40..=40).contains(&power) {
                return Err(QuantityError::TooLarge(text.into()));
            }
            (10, power)
        }
    };
    if negative && mantissa != 0 {
        return Err(QuantityError::Negative(text.into()));
    }
    let too_large = || QuantityError::TooLarge(text.into());
    let pow = |base: i128, exp: u32| base.checked_pow(exp).ok_or_else(too_large);
    // milli = mantissa × 1000 × base^power / 10^fraction_digits, as numerator / denominator.
    let fraction_digits = u32::try_from(fraction.len()).map_err(|_| syntax())?;
    let mut numerator = mantissa.checked_mul(1000).ok_or_else(too_large)?;
    let mut denominator = pow(10, fraction_digits)?;
    if power >= 0 {
        numerator = numerator
            .checked_mul(pow(base, power.unsigned_abs())?)
            .ok_or_else(too_large)?;
    } else {
        denominator = denominator
            .checked_mul(pow(base, power.unsigned_abs())?)
            .ok_or_else(too_large)?;
    }
    let quotient = numerator / denominator;
    let rounded_up = rounding == Rounding::Up && numerator % denominator != 0;
    Ok(Milli(quotient + i128::from(rounded_up)))
}

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
