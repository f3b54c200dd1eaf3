//! The checks before each attempt, in the SPEC's order (§5). The first that fails names the
//! status the attempt is recorded with; the delivery then ends `skipped` and nothing is sent.
//!
//! 1. entitled (the plan allows webhooks) → `not_entitled`   (plans: not built yet)
//! 2. the account has an endpoint for the event → `no_endpoint`
//! 3. the endpoint is verified (with `endpoints.require_verification`) → `unverified` (not built yet)
//! 4. the endpoint is active → `paused` / `disabled`
//! 5. within quota → `rate_limited` (plans: not built yet)

use crate::model::{Endpoint, EndpointState, Status};

/// The first failing condition for an attempt to `endpoint`, or `None` if it may be sent.
pub fn first_failing(endpoint: Option<&Endpoint>) -> Option<Status> {
    let Some(endpoint) = endpoint else {
        return Some(Status::NoEndpoint);
    };
    match endpoint.state {
        EndpointState::Active => None,
        EndpointState::Paused => Some(Status::Paused),
        EndpointState::Disabled => Some(Status::Disabled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SignatureKind;

    fn endpoint(state: EndpointState) -> Endpoint {
        Endpoint {
            id: "ep_1".into(),
            account_id: "a".into(),
            url: "https://example.com/".into(),
            description: String::new(),
            event_types: vec![],
            headers: Default::default(),
            retry_policy: "standard".into(),
            signature: SignatureKind::Hmac,
            state,
            verified: false,
            created_at: 0,
            updated_at: 0,
            secrets: vec![],
        }
    }

    #[test]
    fn missing_endpoint_then_state_decide() {
        assert_eq!(first_failing(None), Some(Status::NoEndpoint));
        assert_eq!(first_failing(Some(&endpoint(EndpointState::Active))), None);
        assert_eq!(
            first_failing(Some(&endpoint(EndpointState::Paused))),
            Some(Status::Paused)
        );
        assert_eq!(
            first_failing(Some(&endpoint(EndpointState::Disabled))),
            Some(Status::Disabled)
        );
    }
}
