//! An independent Standard Webhooks signature verifier, written from the spec
//! (<https://www.standardwebhooks.com/>) and sharing no code with herald, so a
//! bug in herald's signer cannot be mirrored by the check.
//!
//! Signed content: `"{msg_id}.{timestamp}.{body}"`, HMAC-SHA256, base64.
//! Header (`webhook-signature`): space-separated `v1,<base64>` entries; any
//! matching `v1` entry passes (this is what makes secret rotation work).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The HMAC key for `secret`: the base64-decoded part of `whsec_<base64>`,
/// otherwise the secret's raw UTF-8 bytes. `None` if the base64 is invalid.
pub fn key_bytes(secret: &str) -> Option<Vec<u8>> {
    match secret.strip_prefix("whsec_") {
        Some(b64) => STANDARD.decode(b64).ok(),
        None => Some(secret.as_bytes().to_vec()),
    }
}

fn mac(key: &[u8], msg_id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// True if any `v1,<sig>` entry of `signature_header` is a valid signature
/// of `body` for `msg_id` and `timestamp` under `secret` (constant-time).
pub fn verify(
    secret: &str,
    msg_id: &str,
    timestamp: &str,
    body: &[u8],
    signature_header: &str,
) -> bool {
    let Some(key) = key_bytes(secret) else {
        return false;
    };
    signature_header.split_whitespace().any(|entry| {
        let Some(("v1", sig)) = entry.split_once(',') else {
            return false;
        };
        let Ok(sig) = STANDARD.decode(sig) else {
            return false;
        };
        mac(&key, msg_id, timestamp, body)
            .verify_slice(&sig)
            .is_ok()
    })
}

/// A `v1,<base64>` signature made the same way, for building expectations
/// and negative tests on the test side. Panics on an invalid `whsec_` secret.
pub fn sign(secret: &str, msg_id: &str, timestamp: &str, body: &[u8]) -> String {
    let key = key_bytes(secret).expect("secret's whsec_ part is not valid base64");
    let tag = mac(&key, msg_id, timestamp, body).finalize().into_bytes();
    format!("v1,{}", STANDARD.encode(tag))
}
