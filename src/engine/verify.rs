//! The verification handshake (docs/delivery-contract.md): herald POSTs a signed challenge
//! `{"type": "endpoint.verification", "nonce": "<hex>"}` and the endpoint proves it holds the
//! secret by answering `2xx` with the lowercase hex HMAC-SHA256(key, nonce), as plain text or as
//! `{"hmac": "<hex>"}`.

use bytes::Bytes;
use serde_json::json;

use super::Engine;
use crate::ids;
use crate::model::{Endpoint, Status};
use crate::outbound::request::Message;
use crate::signing as sign;

pub const CHALLENGE_TYPE: &str = "endpoint.verification";

/// How a handshake went.
#[derive(Debug, Clone)]
pub struct Verification {
    pub verified: bool,
    /// Why it failed, in words an operator can act on.
    pub reason: Option<String>,
    pub status: Status,
    pub http_status: Option<u16>,
    pub duration_ms: u64,
    pub response_body: String,
}

impl Engine {
    /// Runs the handshake against the endpoint's URL now. Does not change the endpoint.
    pub async fn verify(&self, endpoint: &Endpoint) -> Verification {
        let now = self.clock.now_ms();
        let nonce = ids::random_hex(16);
        let payload = Bytes::from(json!({"type": CHALLENGE_TYPE, "nonce": nonce}).to_string());
        let msg_id = ids::new_id("msg_", now);
        let msg = Message {
            id: &msg_id,
            event_type: CHALLENGE_TYPE,
            attempt: 1,
            delivery_id: None,
            trace: None,
        };
        let (outcome, _) = self.send_message(endpoint, &msg, payload, now).await;
        let answer = String::from_utf8_lossy(&outcome.body).into_owned();
        let reason = match outcome.status {
            Status::Delivered => {
                let expected: Vec<String> = endpoint
                    .signing_secrets(now)
                    .map(|s| sign::hex_hmac(&challenge_key(s), nonce.as_bytes()))
                    .collect();
                let given = answered_hmac(&answer);
                if given.is_some_and(|g| expected.iter().any(|e| e.eq_ignore_ascii_case(&g))) {
                    None
                } else {
                    Some(
                        "the answer is not the HMAC of the nonce: answer 2xx with the lowercase \
                         hex HMAC-SHA256 of the nonce, keyed with the endpoint's secret, as plain \
                         text or as {\"hmac\": \"<hex>\"}"
                            .to_string(),
                    )
                }
            }
            Status::HttpError => Some(format!(
                "the endpoint answered HTTP {}; it must answer 2xx",
                outcome.http_status.unwrap_or(0)
            )),
            Status::Timeout => Some(format!(
                "timeout: {}",
                outcome.error.as_deref().unwrap_or("no answer in time")
            )),
            other => Some(format!(
                "{}: {}",
                other.as_str(),
                outcome.error.as_deref().unwrap_or("request failed")
            )),
        };
        Verification {
            verified: reason.is_none(),
            reason,
            status: outcome.status,
            http_status: outcome.http_status,
            duration_ms: outcome.duration.as_millis() as u64,
            response_body: answer,
        }
    }
}

/// The key the challenge answer is computed with: the HMAC key of a symmetric secret; for an
/// ed25519 endpoint, whose receiver holds only the public key, the `whpk_` public key's bytes
/// (the handshake then proves the receiver controls the URL and has the endpoint's key).
fn challenge_key(secret: &str) -> Vec<u8> {
    sign::public_key_bytes(secret).unwrap_or_else(|| sign::secret_key(secret))
}

/// The hex the endpoint answered: the whole (trimmed) body, or its JSON `hmac` field.
fn answered_hmac(body: &str) -> Option<String> {
    let body = body.trim();
    if body.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(body).ok()?;
        v.get("hmac")?.as_str().map(str::to_string)
    } else {
        Some(body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::answered_hmac;

    #[test]
    fn the_answer_may_be_text_or_json() {
        assert_eq!(answered_hmac("abc123\n").as_deref(), Some("abc123"));
        assert_eq!(
            answered_hmac(r#"{"hmac": "abc123"}"#).as_deref(),
            Some("abc123")
        );
        assert_eq!(
            answered_hmac(r#"{ "hmac":"abc123" , "x": 1 }"#).as_deref(),
            Some("abc123")
        );
        assert_eq!(answered_hmac(r#"{"other": "abc123"}"#), None);
        assert_eq!(answered_hmac(r#"{"hmac": 5}"#), None);
    }
}
