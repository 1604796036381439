//! The client CA from a Kubernetes Secret (`--tls-client-ca-secret`). KEDA's client certificate
//! is issued in KEDA's namespace by an Issuer only that namespace can use; its Secret's `ca.crt`
//! is the CA the scaler must trust, and a pod cannot mount a Secret of another namespace, so the
//! scaler watches that one Secret (RBAC: get/list/watch on it by name, nothing else).
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::watcher;
use kube::runtime::watcher::Event;
use runtime::tls::ClientCa;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, info, info_span, warn};

/// The Secret key holding the CA bundle (what cert-manager writes).
const KEY: &str = "ca.crt";

/// `NAMESPACE/NAME` of a Secret, as given to `--tls-client-ca-secret`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    pub namespace: String,
    pub name: String,
}

impl std::str::FromStr for SecretRef {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let refused = || {
            format!(
                "{value:?} is not NAMESPACE/NAME (for example keda/cozy-autoscaling-keda-client)"
            )
        };
        let (namespace, name) = value.split_once('/').ok_or_else(refused)?;
        if !names::is_dns_label(namespace) || !names::is_dns_subdomain(name) {
            return Err(refused());
        }
        Ok(Self {
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

impl std::fmt::Display for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The Secret's `ca.crt`, or why it is not usable.
fn bundle(secret: &Secret) -> Result<Vec<u8>, String> {
    match secret.data.as_ref().and_then(|data| data.get(KEY)) {
        Some(value) if !value.0.is_empty() => Ok(value.0.clone()),
        _ => Err(format!("has no {KEY:?} key")),
    }
}

/// Watches the Secret until its first read (at most `wait`, so a missing Secret or missing RBAC
/// fails the start with both named) and returns the [`ClientCa`] with the rest of the watch,
/// which the caller runs until `shutdown` (an app's task set) to keep it current. A later
/// deletion keeps the last CA (cert-manager re-creates the Secret).
pub async fn watch_secret(
    client: kube::Client,
    secret: SecretRef,
    wait: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<(ClientCa, impl Future<Output = ()> + Send + 'static)> {
    let (publish, pem) = watch::channel(None::<Vec<u8>>);
    let api: Api<Secret> = Api::namespaced(client, &secret.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", secret.name));
    let source = format!("secret {secret} key {KEY}");
    let what = source.clone();
    let watching = runtime::watch::follow(watcher(api, config), shutdown, move |event| {
        // Failures are `follow`'s to log and back off from; a deletion keeps the last CA.
        let Ok(Event::Apply(object) | Event::InitApply(object)) = event else {
            return;
        };
        match bundle(&object) {
            Ok(bytes) => {
                if publish.send_if_modified(|current| {
                    let changed = current.as_ref() != Some(&bytes);
                    *current = Some(bytes);
                    changed
                }) {
                    info!(source = %what, "client CA read");
                }
            }
            Err(problem) => {
                warn!(source = %what, "the client CA Secret {problem}; keeping the previous CA")
            }
        }
    })
    .instrument(info_span!("client CA watch", source = %source));
    let mut watching = Box::pin(watching);
    let mut first = pem.clone();
    // Driven here until the first read; the caller runs the rest.
    let read = async {
        tokio::select! {
            read = first.wait_for(Option::is_some) => read.map(drop).map_err(drop),
            () = &mut watching => Err(()),
        }
    };
    tokio::time::timeout(wait, read)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "--tls-client-ca-secret {secret}: no Secret with a {KEY:?} key read within {} \
                 (does it exist, and may this ServiceAccount get, list and watch it?)",
                humantime::format_duration(wait)
            )
        })?
        .map_err(|()| anyhow::anyhow!("--tls-client-ca-secret {secret}: the watch stopped"))?;
    Ok((ClientCa::Live { source, pem }, watching))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_ref_is_namespace_slash_name() {
        let parsed: SecretRef = "keda/cozy-autoscaling-keda-client".parse().unwrap();
        assert_eq!(parsed.namespace, "keda");
        assert_eq!(parsed.name, "cozy-autoscaling-keda-client");
        assert_eq!(parsed.to_string(), "keda/cozy-autoscaling-keda-client");
        for refused in ["keda", "/name", "keda/", "Keda/x", "a/b/c", "keda/x,y"] {
            let error = refused.parse::<SecretRef>().unwrap_err();
            assert!(error.contains("NAMESPACE/NAME"), "{refused}: {error}");
        }
    }

    #[test]
    fn the_bundle_is_the_ca_crt_key() {
        let mut secret = Secret::default();
        assert!(bundle(&secret).unwrap_err().contains("ca.crt"));
        secret.data = Some(
            [(KEY.to_string(), k8s_openapi::ByteString(b"PEM".to_vec()))]
                .into_iter()
                .collect(),
        );
        assert_eq!(bundle(&secret).unwrap(), b"PEM");
        secret.data = Some(
            [(KEY.to_string(), k8s_openapi::ByteString(Vec::new()))]
                .into_iter()
                .collect(),
        );
        assert!(bundle(&secret).is_err());
    }
}
