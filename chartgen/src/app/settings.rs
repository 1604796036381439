//! `chartgen.yaml` in the chart: the settings of the run that wrote it, so a re-run or `--check`
//! without flags reproduces it. A flag given later overrides and updates the stored value.

use serde::{Deserialize, Serialize};

/// File name, in the chart directory next to Chart.yaml.
pub const FILE: &str = "chartgen.yaml";

const HEADER: &str = "# Settings of `chartgen app` (`chartgen app --help`). A re-run or `chartgen app --check` without\n\
# flags reproduces the run that wrote this file; a flag given later overrides and updates it.\n\
# Unset target fields are read from the target's template on every run.\n";

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
            Some(t) => serde_norway::from_str(t).map_err(|e| {
                format!("{FILE} is not valid: {e}; fix it or delete it and pass the flags again")
            }),
        }
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
    }
}
