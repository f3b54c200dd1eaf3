//! An endpoint's client certificate for mutual TLS (docs/delivery-contract.md): the PEM chain and
//! key as the API takes them, checked (they parse, the key is one herald can sign with, it matches
//! the certificate, the certificate has not expired) and turned into what the endpoint shows of it.
//! The chain and key themselves are write-only: the store keeps them apart from the endpoint, and
//! nothing here ever puts them in an error.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};

use crate::clock::Millis;
use crate::model::ClientCertificate;

/// Certificates one chain may hold.
const MAX_CHAIN: usize = 8;

/// A checked certificate chain and its key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// What the endpoint object shows (and the digest that names this identity).
    pub shown: ClientCertificate,
}

/// Why a certificate or key was refused: the field and a sentence.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    pub field: &'static str,
    pub message: String,
}

fn refused(field: &'static str, message: impl Into<String>) -> Refused {
    Refused {
        field,
        message: message.into(),
    }
}

/// Checks a PEM chain (end-entity certificate first) and a PEM private key at `now`.
pub fn parse(certificate: &str, private_key: &str, now: Millis) -> Result<Identity, Refused> {
    let chain = CertificateDer::pem_slice_iter(certificate.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| refused("certificate", "certificate must be a PEM certificate chain"))?;
    if chain.is_empty() {
        return Err(refused(
            "certificate",
            "certificate holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    if chain.len() > MAX_CHAIN {
        return Err(refused(
            "certificate",
            format!("certificate holds more than {MAX_CHAIN} certificates"),
        ));
    }
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).map_err(|_| {
        refused(
            "certificate",
            "the first certificate is not a valid X.509 certificate",
        )
    })?;
    let not_after = leaf.validity().not_after.timestamp().saturating_mul(1000);
    if not_after <= now {
        return Err(refused(
            "certificate",
            format!(
                "the certificate expired at {}",
                crate::clock::rfc3339(not_after)
            ),
        ));
    }
    let subject = leaf.subject().to_string();
    // Parsing errors of a key name no part of it.
    let key = PrivateKeyDer::from_pem_slice(private_key.as_bytes()).map_err(|_| {
        refused(
            "private_key",
            "private_key must be one PEM private key (PKCS#8, PKCS#1 or SEC1)",
        )
    })?;
    let signing = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|_| {
            refused(
                "private_key",
                "private_key is not a key herald can sign with (RSA, ECDSA P-256/P-384, Ed25519)",
            )
        })?;
    CertifiedKey::new(chain.clone(), signing)
        .keys_match()
        .map_err(|_| {
            refused(
                "private_key",
                "private_key does not match the certificate's public key",
            )
        })?;
    let digest = Sha256::digest(&chain[0]);
    Ok(Identity {
        chain,
        key,
        shown: ClientCertificate {
            subject,
            not_after,
            sha256: digest.iter().map(|b| format!("{b:02x}")).collect(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-03T06:00:00Z.
    const NOW: Millis = 1_796_277_600_000;

    fn pair(name: &str) -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
        (c.cert.pem(), c.key_pair.serialize_pem())
    }

    #[test]
    fn a_matching_pair_shows_its_subject_and_expiry() {
        let (cert, key) = pair("client.example");
        let id = parse(&cert, &key, NOW).unwrap();
        assert_eq!(id.chain.len(), 1);
        assert!(
            id.shown.subject.contains("CN=rcgen self signed cert"),
            "{}",
            id.shown.subject
        );
        assert!(id.shown.not_after > NOW);
        assert_eq!(id.shown.sha256.len(), 64);
    }

    #[test]
    fn bad_pairs_are_refused_with_the_field_and_never_echo_the_key() {
        let (cert, key) = pair("a.example");
        let (_, other_key) = pair("b.example");
        let mut params = rcgen::CertificateParams::new(vec!["old.example".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let old_key = rcgen::KeyPair::generate().unwrap();
        let expired = params.self_signed(&old_key).unwrap().pem();
        let cases: [(&str, &str, &str); 6] = [
            ("not pem", &key, "certificate"),
            ("", &key, "certificate"),
            (&cert, "not a key", "private_key"),
            (&cert, &cert, "private_key"),
            (&cert, &other_key, "private_key"),
            (&expired, &old_key.serialize_pem(), "certificate"),
        ];
        for (c, k, field) in cases {
            let e = parse(c, k, NOW).err().expect("refused");
            assert_eq!(e.field, field, "{e:?}");
            assert!(!e.message.contains("PRIVATE KEY-----"), "{e:?}");
        }
    }
}
