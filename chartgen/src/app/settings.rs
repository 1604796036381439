//! `chartgen.yaml` in the chart: the settings of the run that wrote it, so a re-run or `--check`
//! without flags reproduces it. A flag given later overrides and updates the stored value.

use serde::{Deserialize, Serialize};

/// File name, in the chart directory next to Chart.yaml.
pub const FILE: &str = "chartgen.yaml";

const HEADER: &str = "# Settings of `chartgen app` (`chartgen app --help`). A re-run or `chartgen app --check` without\n\
# flags reproduces the run that wrote this file; a flag given later overrides and updates it.\n\
# Unset target fields are read from the target's template on every run.\n";

/// Where a setting came from, to name it in an error.
#[derive(Debug, Clone, Copy)]
pub enum Origin {
    Flags,
    File,
}

/// What a setting must look like.
#[derive(Debug, Clone, Copy)]
enum Rule {
    /// A field or kind name: `instances`, `Cluster`.
    Name,
    /// A dotted values path: `cluster.instances`.
    Path,
    /// A values path, or `''` for none.
    PathOrNone,
    /// `group/version` or `version`.
    ApiVersion,
    /// A one-line Go-template expression.
    Expr,
    /// `host:port`.
    Address,
}

impl Rule {
    fn check(self, v: &str) -> Result<(), &'static str> {
        let name = |s: &str| {
            s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let ok = match self {
            Rule::Name => name(v),
            Rule::Path => v.split('.').all(name),
            Rule::PathOrNone => v.is_empty() || v.split('.').all(name),
            Rule::ApiVersion => {
                !v.is_empty()
                    && v.len() <= 253
                    && v.split('/').count() <= 2
                    && v.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-/".contains(c))
            }
            Rule::Expr => {
                !v.trim().is_empty()
                    && v.len() <= 512
                    && !v.chars().any(char::is_control)
                    && !v.contains("{{")
                    && !v.contains("}}")
            }
            Rule::Address => v.rsplit_once(':').is_some_and(|(host, port)| {
                let host = host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .unwrap_or(host);
                !host.is_empty()
                    && host.len() <= 253
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || ".-:".contains(c))
                    && port.parse::<u16>().is_ok_and(|p| p > 0)
            }),
        };
        ok.then_some(()).ok_or(match self {
            Rule::Name => "a name (letters, digits and _)",
            Rule::Path | Rule::PathOrNone => "a dotted values path (for example cluster.instances)",
            Rule::ApiVersion => "an apiVersion (group/version)",
            Rule::Expr => "a one-line Go-template expression without {{ or }}",
            Rule::Address => "host:port (for example scaler.cozy-autoscaling.svc:6000)",
        })
    }
}

/// Every setting; `None` is "not given" (a flag) or "not stored" (the file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_field: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sync_replicas_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaler_address: Option<String>,
}

impl Settings {
    /// `self` (flags) over `stored`: what this run uses and stores.
    pub fn over(self, stored: Settings) -> Settings {
        Settings {
            replica_field: self.replica_field.or(stored.replica_field),
            values_key: self.values_key.or(stored.values_key),
            target_api_version: self.target_api_version.or(stored.target_api_version),
            target_kind: self.target_kind.or(stored.target_kind),
            target_name: self.target_name.or(stored.target_name),
            target_namespace: self.target_namespace.or(stored.target_namespace),
            max_sync_replicas_key: self.max_sync_replicas_key.or(stored.max_sync_replicas_key),
            scaler_address: self.scaler_address.or(stored.scaler_address),
        }
    }

    /// Reads the stored settings; a missing file is no settings.
    pub fn parse(text: Option<&str>) -> Result<Settings, String> {
        match text {
            None => Ok(Settings::default()),
            Some(t)
                if t.trim()
                    .lines()
                    .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) =>
            {
                Ok(Settings::default())
            }
            Some(t) => {
                if let Some(line) = super::values::deeper_than(t, super::values::MAX_DEPTH) {
                    return Err(format!(
                        "{FILE} nests deeper than {} levels (line {line}); it is a flat list of settings: fix it or delete it and pass the flags again",
                        super::values::MAX_DEPTH
                    ));
                }
                let stored: Settings = serde_norway::from_str(t).map_err(|e| {
                    format!(
                        "{FILE} is not valid: {e}; fix it or delete it and pass the flags again"
                    )
                })?;
                stored.check(Origin::File)?;
                Ok(stored)
            }
        }
    }

    /// Refuses a setting chartgen cannot write safely into the chart: every one ends up in a
    /// template or values.yaml, so a newline, a quote or a stray `}}` would break them.
    pub fn check(&self, origin: Origin) -> Result<(), String> {
        let fields: [(&str, &str, &Option<String>, Rule); 8] = [
            (
                "--replica-field",
                "replicaField",
                &self.replica_field,
                Rule::Name,
            ),
            ("--values-key", "valuesKey", &self.values_key, Rule::Path),
            (
                "--target-api-version",
                "targetApiVersion",
                &self.target_api_version,
                Rule::ApiVersion,
            ),
            ("--target-kind", "targetKind", &self.target_kind, Rule::Name),
            ("--target-name", "targetName", &self.target_name, Rule::Expr),
            (
                "--target-namespace",
                "targetNamespace",
                &self.target_namespace,
                Rule::Expr,
            ),
            (
                "--max-sync-replicas-key",
                "maxSyncReplicasKey",
                &self.max_sync_replicas_key,
                Rule::PathOrNone,
            ),
            (
                "--scaler-address",
                "scalerAddress",
                &self.scaler_address,
                Rule::Address,
            ),
        ];
        for (flag, key, value, rule) in fields {
            let Some(value) = value else { continue };
            if let Err(want) = rule.check(value) {
                let what = match origin {
                    Origin::Flags => flag.to_owned(),
                    Origin::File => format!("`{key}` in {FILE}"),
                };
                return Err(format!(
                    "{what} {value:?} is not {want}; chartgen refuses it"
                ));
            }
        }
        Ok(())
    }

    pub fn to_text(&self) -> String {
        let body = serde_norway::to_string(self).unwrap_or_default();
        let body = if body.trim() == "{}" {
            String::new()
        } else {
            body
        };
        format!("{HEADER}{body}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_and_round_trip() {
        let stored = Settings {
            values_key: Some("cluster.instances".into()),
            max_sync_replicas_key: Some(String::new()),
            ..Settings::default()
        };
        let flags = Settings {
            values_key: Some("replicas".into()),
            ..Settings::default()
        };
        let used = flags.over(stored);
        assert_eq!(used.values_key.as_deref(), Some("replicas"));
        assert_eq!(used.max_sync_replicas_key.as_deref(), Some(""));
        assert_eq!(Settings::parse(Some(&used.to_text())).unwrap(), used);
        assert_eq!(
            Settings::parse(Some(&Settings::default().to_text())).unwrap(),
            Settings::default()
        );
        assert!(
            Settings::parse(Some("valuesKey: [\n"))
                .unwrap_err()
                .contains(FILE)
        );
        assert!(Settings::parse(Some("bogus: 1\n")).is_err());
        let deep = format!(
            "valuesKey: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(
            Settings::parse(Some(&deep))
                .unwrap_err()
                .contains("nests deeper")
        );
    }

    #[test]
    fn unsafe_settings_are_refused_naming_where_they_came_from() {
        let bad = |s: Settings, origin| s.check(origin).unwrap_err();
        let address = Settings {
            scaler_address: Some("scaler:6000\nevil: true".into()),
            ..Settings::default()
        };
        assert!(bad(address.clone(), Origin::Flags).starts_with("--scaler-address "));
        assert!(bad(address, Origin::File).starts_with("`scalerAddress` in chartgen.yaml"));
        for ok in ["scaler.ns.svc:6000", "10.0.0.1:6000", "[fd00::1]:6000"] {
            let s = Settings {
                scaler_address: Some(ok.into()),
                ..Settings::default()
            };
            assert!(s.check(Origin::Flags).is_ok(), "{ok}");
        }
        let name = Settings {
            target_name: Some("x }}{{ fail \"boom\"".into()),
            values_key: Some("cluster.instances".into()),
            max_sync_replicas_key: Some(String::new()),
            ..Settings::default()
        };
        assert!(bad(name, Origin::Flags).starts_with("--target-name"));
        let key = Settings {
            values_key: Some("a b".into()),
            ..Settings::default()
        };
        assert!(bad(key, Origin::Flags).starts_with("--values-key"));
    }
}
