//! The checks before each attempt, in the contract's order (docs/delivery-contract.md). The first
//! that fails names the status the attempt is recorded with; the delivery then ends `skipped` and
//! nothing is sent.
//!
//! 1. entitled: the account's plan allows webhooks (no plan synced: entitled) → `not_entitled`
//! 2. the account has an endpoint for the event → `no_endpoint`
//! 3. the endpoint is verified (with `endpoints.require_verification`) → `unverified`
//! 4. the endpoint is active → `paused` / `disabled`
//! 5. within quota → `rate_limited`
//!
//! 1–4 are pure and decided here; 5 counts in the store, so the engine runs it last and only
//! when 1–4 pass (a request that is not sent is not counted).

use crate::model::{Endpoint, EndpointState, Plan, Status};

/// The first failing condition of 1–4, or `None` if the attempt may go on to the quota check.
pub fn first_failing(
    plan: Option<&Plan>,
    endpoint: Option<&Endpoint>,
    require_verification: bool,
) -> Option<Status> {
    if plan.is_some_and(|p| !p.webhooks) {
        return Some(Status::NotEntitled);
    }
    let Some(endpoint) = endpoint else {
        return Some(Status::NoEndpoint);
    };
    if require_verification && !endpoint.verified {
        return Some(Status::Unverified);
    }
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

    fn endpoint(state: EndpointState, verified: bool) -> Endpoint {
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
            verified,
            created_at: 0,
            updated_at: 0,
            secrets: vec![],
            ordering: None,
            rate_limit: None,
            client_certificate: None,
            filter: None,
            uid: None,
            metadata: Default::default(),
            channels: Vec::new(),
            signature_headers: Default::default(),
            propagate_trace: false,
        }
    }

    fn plan(webhooks: bool) -> Plan {
        Plan {
            webhooks,
            ..Plan::default()
        }
    }

    #[test]
    fn each_condition_alone() {
        let ok = endpoint(EndpointState::Active, true);
        assert_eq!(first_failing(None, Some(&ok), true), None);
        assert_eq!(first_failing(Some(&plan(true)), Some(&ok), true), None);
        assert_eq!(
            first_failing(Some(&plan(false)), Some(&ok), true),
            Some(Status::NotEntitled)
        );
        assert_eq!(first_failing(None, None, true), Some(Status::NoEndpoint));
        let unverified = endpoint(EndpointState::Active, false);
        assert_eq!(
            first_failing(None, Some(&unverified), true),
            Some(Status::Unverified)
        );
        assert_eq!(first_failing(None, Some(&unverified), false), None);
        assert_eq!(
            first_failing(None, Some(&endpoint(EndpointState::Paused, true)), true),
            Some(Status::Paused)
        );
        assert_eq!(
            first_failing(None, Some(&endpoint(EndpointState::Disabled, true)), true),
            Some(Status::Disabled)
        );
    }

    #[test]
    fn earlier_conditions_win_pairwise() {
        let paused_unverified = endpoint(EndpointState::Paused, false);
        // Not entitled beats no endpoint.
        assert_eq!(
            first_failing(Some(&plan(false)), None, true),
            Some(Status::NotEntitled)
        );
        // Not entitled beats unverified and paused.
        assert_eq!(
            first_failing(Some(&plan(false)), Some(&paused_unverified), true),
            Some(Status::NotEntitled)
        );
        // Unverified beats paused.
        assert_eq!(
            first_failing(None, Some(&paused_unverified), true),
            Some(Status::Unverified)
        );
        // Unverified beats disabled.
        assert_eq!(
            first_failing(None, Some(&endpoint(EndpointState::Disabled, false)), true),
            Some(Status::Unverified)
        );
    }
}
