//! Values the store tests build: an endpoint as the API would store it.

use herald::model::{Endpoint, EndpointState, SignatureKind};

/// An active, verified endpoint of `account` to `https://example.com/hook`, made at `at`.
pub fn endpoint(id: &str, account: &str, at: i64) -> Endpoint {
    Endpoint {
        id: id.into(),
        account_id: account.into(),
        url: "https://example.com/hook".into(),
        description: String::new(),
        event_types: Vec::new(),
        headers: Default::default(),
        retry_policy: "standard".into(),
        signature: SignatureKind::Hmac,
        state: EndpointState::Active,
        verified: true,
        created_at: at,
        updated_at: at,
        secrets: Vec::new(),
        ordering: None,
        rate_limit: None,
        client_certificate: None,
        filter: None,
        uid: None,
        metadata: Default::default(),
        channels: Vec::new(),
        signature_headers: Default::default(),
    }
}
