//! Standard Webhooks signing (<https://www.standardwebhooks.com>), and secrets.
//!
//! The signed content is `{webhook-id}.{webhook-timestamp}.{body}`; the signature header carries
//! one `v1,<base64 HMAC-SHA256>` per valid secret, space-separated, so a receiver that knows any
//! one of them verifies the request during a rotation.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Imported secrets may come with or without base64 padding (the official Standard Webhooks
/// libraries accept both), so decoding them does not insist on `=`.
const SECRET_B64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

pub const SECRET_PREFIX: &str = "whsec_";

/// A fresh secret: `whsec_` + base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut key = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", B64.encode(key))
}

/// The HMAC key of a secret: the decoded base64 of a `whsec_` secret, else the UTF-8 bytes of an
/// imported one (docs/delivery-contract.md: a secret that does not start with `whsec_` signs as its
/// bytes).
pub fn secret_key(secret: &str) -> Vec<u8> {
    match secret.strip_prefix(SECRET_PREFIX) {
        Some(b64) => SECRET_B64
            .decode(b64)
            .unwrap_or_else(|_| secret.as_bytes().to_vec()),
        None => secret.as_bytes().to_vec(),
    }
}

/// True if a `whsec_` secret carries valid base64 (checked when a secret is imported).
pub fn secret_is_valid(secret: &str) -> bool {
    match secret.strip_prefix(SECRET_PREFIX) {
        Some(b64) => SECRET_B64.decode(b64).is_ok_and(|k| !k.is_empty()),
        None => !secret.is_empty(),
    }
}

fn mac(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length")
}

/// One `v1,<base64>` signature.
pub fn sign_v1(key: &[u8], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut m = mac(key);
    m.update(msg_id.as_bytes());
    m.update(b".");
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    format!("v1,{}", B64.encode(m.finalize().into_bytes()))
}

/// The `webhook-signature` value: one signature per secret, space-separated: `v1,` (HMAC) for
/// symmetric secrets, `v1a,` (ed25519) for `whsk_` keys.
pub fn signature_header<'a>(
    secrets: impl Iterator<Item = &'a str>,
    msg_id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .filter_map(|s| match s.strip_prefix(SIGNING_KEY_PREFIX) {
            Some(_) => sign_v1a(s, msg_id, timestamp, body),
            None => Some(sign_v1(&secret_key(s), msg_id, timestamp, body)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub const SIGNING_KEY_PREFIX: &str = "whsk_";
pub const PUBLIC_KEY_PREFIX: &str = "whpk_";

/// A fresh ed25519 key pair: `whsk_` + base64 of the 32-byte private key (the RFC 8032 seed)
/// and `whpk_` + base64 of the 32-byte public key.
pub fn new_signing_key() -> (String, String) {
    let mut seed = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut seed);
    let sk = format!("{SIGNING_KEY_PREFIX}{}", B64.encode(seed));
    let pk = public_key_of(&sk).expect("a 32-byte seed is a valid ed25519 key");
    (sk, pk)
}

fn key_pair(signing_key: &str) -> Option<ring::signature::Ed25519KeyPair> {
    let seed = SECRET_B64
        .decode(signing_key.strip_prefix(SIGNING_KEY_PREFIX)?)
        .ok()?;
    ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed).ok()
}

/// The raw 32-byte public key of a `whsk_` signing key.
pub fn public_key_bytes(signing_key: &str) -> Option<Vec<u8>> {
    use ring::signature::KeyPair;
    Some(key_pair(signing_key)?.public_key().as_ref().to_vec())
}

/// The `whpk_` public key of a `whsk_` signing key.
pub fn public_key_of(signing_key: &str) -> Option<String> {
    let pk = public_key_bytes(signing_key)?;
    Some(format!("{PUBLIC_KEY_PREFIX}{}", B64.encode(pk)))
}

/// One `v1a,<base64 ed25519 signature>` of `{msg_id}.{timestamp}.{body}`.
pub fn sign_v1a(signing_key: &str, msg_id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let pair = key_pair(signing_key)?;
    let mut content = Vec::with_capacity(msg_id.len() + body.len() + 24);
    content.extend_from_slice(msg_id.as_bytes());
    content.push(b'.');
    content.extend_from_slice(timestamp.to_string().as_bytes());
    content.push(b'.');
    content.extend_from_slice(body);
    Some(format!("v1a,{}", B64.encode(pair.sign(&content).as_ref())))
}

/// Lowercase hex HMAC-SHA256 of `data` (the `sha256-hex` scheme and the verification answer).
pub fn hex_hmac(key: &[u8], data: &[u8]) -> String {
    let mut m = mac(key);
    m.update(data);
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Verifies a `webhook-signature` header against one secret (used by `herald receive`): any `v1`
/// value that matches passes, compared in constant time by the `hmac` crate.
pub fn verify(secret: &str, msg_id: &str, timestamp: &str, body: &[u8], header: &str) -> bool {
    let key = secret_key(secret);
    header.split(' ').any(|sig| {
        let Some(b64) = sig.strip_prefix("v1,") else {
            return false;
        };
        let Ok(expected) = B64.decode(b64) else {
            return false;
        };
        let mut m = mac(&key);
        m.update(msg_id.as_bytes());
        m.update(b".");
        m.update(timestamp.as_bytes());
        m.update(b".");
        m.update(body);
        m.verify_slice(&expected).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Standard Webhooks specification's own test vector.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn standard_webhooks_test_vector() {
        assert_eq!(sign_v1(&secret_key(SECRET), ID, TS, BODY), SIG);
        assert!(verify(SECRET, ID, "1614265330", BODY, SIG));
    }

    #[test]
    fn rotation_header_carries_one_signature_per_secret_and_verifies_with_either() {
        let other = new_secret();
        let header = signature_header([SECRET, other.as_str()].into_iter(), ID, TS, BODY);
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], SIG);
        assert!(verify(&other, ID, "1614265330", BODY, &header));
        assert!(verify(SECRET, ID, "1614265330", BODY, &header));
        assert!(!verify(SECRET, ID, "1614265331", BODY, &header));
        assert!(!verify(SECRET, ID, "1614265330", b"{}", &header));
    }

    #[test]
    fn new_secrets_are_whsec_with_32_bytes_and_imported_ones_are_utf8() {
        let s = new_secret();
        assert!(s.starts_with("whsec_"));
        assert_eq!(secret_key(&s).len(), 32);
        assert_eq!(secret_key("plain-secret"), b"plain-secret".to_vec());
        assert!(secret_is_valid(&s));
        assert!(!secret_is_valid("whsec_!!!"));
        // Unpadded base64 is the same key.
        let unpadded = s.trim_end_matches('=');
        assert!(secret_is_valid(unpadded));
        assert_eq!(secret_key(unpadded), secret_key(&s));
    }

    #[test]
    fn ed25519_signatures_verify_with_the_public_key() {
        use ring::signature::{UnparsedPublicKey, ED25519};
        let (sk, pk) = new_signing_key();
        assert!(sk.starts_with("whsk_") && pk.starts_with("whpk_"));
        assert_eq!(public_key_of(&sk).as_deref(), Some(pk.as_str()));
        let header = signature_header([sk.as_str()].into_iter(), ID, TS, BODY);
        let sig = B64.decode(header.strip_prefix("v1a,").unwrap()).unwrap();
        let pk = B64.decode(pk.strip_prefix("whpk_").unwrap()).unwrap();
        let content = format!("{ID}.{TS}.{}", std::str::from_utf8(BODY).unwrap());
        UnparsedPublicKey::new(&ED25519, pk)
            .verify(content.as_bytes(), &sig)
            .unwrap();
    }

    #[test]
    fn hex_hmac_is_lowercase_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            hex_hmac(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
