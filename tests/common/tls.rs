//! A throw-away certificate authority for HTTPS tests.
//!
//! Herald delivers over real TLS; tests point its `delivery.extra_ca_file` at
//! this CA so that receivers can present genuine, verifiable certificates for
//! `localhost`, 127.0.0.1 and ::1 — no verification is switched off anywhere.
//!
//! rustls is always given the ring provider explicitly: the test process sets
//! no process-wide default provider.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed CA (ECDSA P-256) that signs leaf certificates on demand.
pub struct TestCa {
    cert: Certificate,
    key: KeyPair,
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    /// Generates a fresh CA; every test gets its own, so trust never leaks
    /// between tests.
    pub fn new() -> Self {
        let key = KeyPair::generate().expect("generate CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "herald test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-sign CA");
        TestCa { cert, key }
    }

    /// The CA certificate in PEM form.
    pub fn ca_pem(&self) -> String {
        self.cert.pem()
    }

    /// The CA certificate in DER form (for building trust stores directly).
    pub fn ca_der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// Writes the CA PEM to `dir/test-ca.pem` (for herald's
    /// `delivery.extra_ca_file`) and returns the path.
    pub fn write_ca_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join("test-ca.pem");
        std::fs::write(&path, self.ca_pem())
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    /// A rustls server config whose leaf certificate (fresh key, signed by
    /// this CA) covers DNS `localhost` and IPs 127.0.0.1 and ::1. The chain
    /// sent is leaf + CA. No ALPN is set, so any HTTP/1.1 client is accepted.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.server_config_with(None)
    }

    /// Like [`Self::server_config`], but the server requires a client certificate signed by
    /// this CA (mutual TLS) and refuses the handshake without one.
    pub fn server_config_requiring_client_auth(&self) -> Arc<rustls::ServerConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der()).expect("add CA to root store");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(ring_provider()),
        )
        .build()
        .expect("client verifier");
        self.server_config_with(Some(verifier))
    }

    /// A client certificate (chain PEM: leaf then CA) and its PKCS#8 key PEM, for mutual TLS,
    /// signed by this CA with the common name `cn`.
    pub fn client_identity_pem(&self, cn: &str) -> (String, String) {
        let key = KeyPair::generate().expect("generate client key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let leaf = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("sign client certificate");
        (
            format!("{}{}", leaf.pem(), self.ca_pem()),
            key.serialize_pem(),
        )
    }

    /// A server certificate chain (leaf then CA, PEM) for `localhost`, 127.0.0.1 and ::1, and
    /// its PKCS#8 key PEM: for servers that read files, such as PostgreSQL.
    pub fn server_identity_pem(&self) -> (String, String) {
        let (leaf, key) = self.server_leaf();
        (
            format!("{}{}", leaf.pem(), self.ca_pem()),
            key.serialize_pem(),
        )
    }

    /// A leaf certificate signed by this CA for `localhost`, 127.0.0.1 and ::1, and its key.
    fn server_leaf(&self) -> (Certificate, KeyPair) {
        let leaf_key = KeyPair::generate().expect("generate leaf key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("leaf params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().expect("valid DNS name")),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        ];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let leaf = params
            .signed_by(&leaf_key, &self.cert, &self.key)
            .expect("sign leaf");
        (leaf, leaf_key)
    }

    fn server_config_with(
        &self,
        client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Arc<rustls::ServerConfig> {
        let (leaf, leaf_key) = self.server_leaf();
        let chain = vec![leaf.der().clone(), self.ca_der()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(ring_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions");
        let config = match client_verifier {
            Some(v) => config.with_client_cert_verifier(v),
            None => config.with_no_client_auth(),
        }
        .with_single_cert(chain, key)
        .expect("valid server cert/key");
        Arc::new(config)
    }

    /// A rustls client config that trusts only this CA (no web PKI roots),
    /// for tests that talk to a TLS [`super::Receiver`] themselves.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der()).expect("add CA to root store");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(ring_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    }
}

/// The ring crypto provider, passed explicitly (no process default is set).
pub fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}
