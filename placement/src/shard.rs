//! Canonical shard names `shard<i>` (docs/design.md §S1).
//!
//! Only the canonical spelling counts: `shard0`, `shard1`, … `shard01`, `shard-1`, `shard`,
//! `Shard1` and the legacy `tenants` are rejected, so one shard has exactly one name and a
//! label selector `sharding.fluxcd.io/key=shard<i>` matches every HelmRelease placed on it.
use std::fmt;

/// Shard label on HelmReleases.
pub const SHARD_KEY_LABEL: &str = "sharding.fluxcd.io/key";
/// Assignment label on tenant Namespaces.
pub const NAMESPACE_SHARD_LABEL: &str = "internal.cozystack.io/flux-shard";
/// Prefix of every shard name and of shard Deployment names after `helm-controller-`.
const SHARD_PREFIX: &str = "shard";
/// Prefix of shard Deployment names (`helm-controller-shard<i>`).
const DEPLOYMENT_PREFIX: &str = "helm-controller-";

/// Index of a shard; its name is `shard<index>`.
pub type ShardIndex = u32;

/// Why a string is not a canonical shard name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardNameError {
    #[error("shard name {0:?} does not start with \"shard\"; expected shard<i>, e.g. shard0")]
    Prefix(String),
    #[error("shard name {0:?} has no index; expected shard<i>, e.g. shard0")]
    Empty(String),
    #[error(
        "shard name {0:?} has a non-canonical index; write shard<i> with decimal digits and no leading zeros, e.g. shard1"
    )]
    NotCanonical(String),
}

/// Parses `shard<i>` canonically: decimal digits only, no sign, no leading zeros (except `shard0`).
pub fn parse_shard_index(name: &str) -> Result<ShardIndex, ShardNameError> {
    let digits = name
        .strip_prefix(SHARD_PREFIX)
        .ok_or_else(|| ShardNameError::Prefix(name.to_owned()))?;
    if digits.is_empty() {
        return Err(ShardNameError::Empty(name.to_owned()));
    }
    let canonical =
        digits.bytes().all(|b| b.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
    if !canonical {
        return Err(ShardNameError::NotCanonical(name.to_owned()));
    }
    // Only overflow can fail here; such an index is no shard we could ever run.
    digits
        .parse()
        .map_err(|_| ShardNameError::NotCanonical(name.to_owned()))
}

/// The canonical name of shard `index`.
pub fn shard_name(index: ShardIndex) -> String {
    ShardName(index).to_string()
}

/// The name of shard `index`'s helm-controller Deployment, `helm-controller-shard<i>`.
pub fn deployment_name(index: ShardIndex) -> String {
    format!("{DEPLOYMENT_PREFIX}{}", ShardName(index))
}

/// The shard index a Deployment named `helm-controller-shard<i>` serves, if it is one.
pub fn shard_of_deployment(deployment: &str) -> Option<ShardIndex> {
    deployment
        .strip_prefix(DEPLOYMENT_PREFIX)
        .and_then(|shard| parse_shard_index(shard).ok())
}

/// Displays a shard index as its canonical name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardName(pub ShardIndex);

impl fmt::Display for ShardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SHARD_PREFIX}{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_canonical_names() {
        assert_eq!(parse_shard_index("shard0"), Ok(0));
        assert_eq!(parse_shard_index("shard1"), Ok(1));
        assert_eq!(parse_shard_index("shard15"), Ok(15));
        assert_eq!(parse_shard_index("shard100"), Ok(100));
    }

    #[test]
    fn rejects_non_canonical_names() {
        for bad in [
            "shard01",
            "shard00",
            "shard-1",
            "shard+1",
            "shard",
            "tenants",
            "Shard1",
            "shard 1",
            "shard1 ",
            "",
            "shard1a",
            "shard٣",
            "shard99999999999",
        ] {
            assert!(parse_shard_index(bad).is_err(), "{bad:?} must be rejected");
        }
        assert_eq!(
            parse_shard_index("tenants"),
            Err(ShardNameError::Prefix("tenants".into()))
        );
        assert_eq!(
            parse_shard_index("shard"),
            Err(ShardNameError::Empty("shard".into()))
        );
        assert_eq!(
            parse_shard_index("shard01"),
            Err(ShardNameError::NotCanonical("shard01".into()))
        );
    }

    #[test]
    fn error_names_the_fix() {
        let msg = parse_shard_index("shard01").unwrap_err().to_string();
        assert!(
            msg.contains("shard01") && msg.contains("no leading zeros"),
            "{msg}"
        );
    }

    #[test]
    fn deployment_names() {
        assert_eq!(shard_of_deployment("helm-controller-shard3"), Some(3));
        assert_eq!(shard_of_deployment(&deployment_name(7)), Some(7));
        assert_eq!(shard_of_deployment("helm-controller-shard03"), None);
        assert_eq!(shard_of_deployment("helm-controller"), None);
        assert_eq!(shard_of_deployment("flux"), None);
        assert_eq!(shard_of_deployment("shard3"), None);
    }

    proptest! {
        #[test]
        fn name_round_trips(i in any::<u32>()) {
            prop_assert_eq!(parse_shard_index(&shard_name(i)), Ok(i));
        }

        #[test]
        fn parsed_names_are_canonical(s in "shard[0-9]{1,4}") {
            if let Ok(i) = parse_shard_index(&s) {
                prop_assert_eq!(shard_name(i), s);
            }
        }
    }
}
