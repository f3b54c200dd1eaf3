//! The TLS client setup herald's connections share: the bundled web PKI roots plus an
//! operator's CA file, and rustls with ring, TLS 1.3 and 1.2. Deliveries (`outbound`) and the
//! cluster's database connections (`store::postgres`) each build on it; alert mails
//! (`alerts`) trust the same roots and CA file through lettre's TLS parameters.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// The web PKI roots, plus every certificate of the PEM file at `extra` if given. The error
/// says what is wrong with the file (the caller names its key).
pub fn roots(extra: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra {
        for cert in extra_certificates(path)? {
            roots.add(cert).map_err(|e| e.to_string())?;
        }
    }
    Ok(roots)
}

/// Every certificate of the PEM file at `path` (at least one): what [`roots`] adds to the web
/// PKI roots, and what alert mails' SMTP connections trust besides the same roots.
pub fn extra_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in the file".into());
    }
    Ok(certs)
}

/// A client config trusting `roots`, before its choice of client certificate.
pub fn client_builder(
    roots: &Arc<rustls::RootCertStore>,
) -> Result<
    rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>,
    rustls::Error,
> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_root_certificates(roots.clone()))
}
