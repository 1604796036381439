//! Client identity on top of CA verification: the CA proves who signed a client certificate; this
//! checks what it names (subject CN, DNS or URI SAN) against the identities a server accepts, so a
//! CA that also signs for others does not make those others clients.
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, SignatureScheme,
};
use x509_parser::extensions::GeneralName;

/// Names a certificate carries, in the order: subject CNs, then DNS and URI SANs. Empty for DER
/// that does not parse (the CA check has already refused such a certificate).
pub fn identities_of(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => names.push((*dns).to_owned()),
                GeneralName::URI(uri) => names.push((*uri).to_owned()),
                _ => {}
            }
        }
    }
    names
}

/// Whether a certificate naming `names` is one of `accepted` (exact, case-sensitive match: CNs
/// and URIs are case-sensitive, and DNS names in certificates are lower case).
pub fn accepted(names: &[String], accepted: &[String]) -> bool {
    names.iter().any(|name| accepted.contains(name))
}

#[derive(Debug, thiserror::Error)]
#[error("client certificate names {names:?}, none of the accepted identities {accepted:?}")]
struct IdentityRefused {
    names: Vec<String>,
    accepted: Vec<String>,
}

/// `inner`'s verification, then the identity check.
#[derive(Debug)]
pub(crate) struct IdentityVerifier {
    pub(crate) inner: Arc<dyn ClientCertVerifier>,
    pub(crate) identities: Vec<String>,
}

impl ClientCertVerifier for IdentityVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let names = identities_of(end_entity);
        if accepted(&names, &self.identities) {
            return Ok(verified);
        }
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(IdentityRefused {
                names,
                accepted: self.identities.clone(),
            })),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    fn cert(cn: Option<&str>, sans: Vec<SanType>) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.subject_alt_names = sans;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn names_come_from_the_common_name_and_the_dns_and_uri_sans() {
        let der = cert(
            Some("keda-operator"),
            vec![
                SanType::DnsName("keda-operator.keda.svc".try_into().unwrap()),
                SanType::URI(
                    "spiffe://cluster.local/ns/keda/sa/keda-operator"
                        .try_into()
                        .unwrap(),
                ),
                SanType::IpAddress("10.0.0.1".parse().unwrap()),
            ],
        );
        assert_eq!(
            identities_of(&der),
            strings(&[
                "keda-operator",
                "keda-operator.keda.svc",
                "spiffe://cluster.local/ns/keda/sa/keda-operator"
            ])
        );
        assert_eq!(identities_of(&cert(None, vec![])), Vec::<String>::new());
        assert_eq!(identities_of(b"not DER"), Vec::<String>::new());
    }

    #[test]
    fn only_an_exact_name_is_accepted() {
        let keda = strings(&["keda-operator"]);
        assert!(accepted(&strings(&["keda-operator"]), &keda));
        assert!(accepted(&strings(&["other", "keda-operator"]), &keda));
        for refused in [&[][..], &["keda-operator-x"], &["KEDA-operator"], &["keda"]] {
            assert!(!accepted(&strings(refused), &keda), "{refused:?}");
        }
    }
}
