//! Builds the signed request (docs/delivery-contract.md) for one message to one endpoint: the
//! standard headers, the Standard Webhooks signature, the optional `sha256-hex` header, and the
//! endpoint's custom headers with `{{ secret.NAME }}` macros expanded.
//!
//! The headers recorded in the delivery log keep the macros unexpanded: an account secret never
//! reaches the log or the API.

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE, USER_AGENT};

use super::client::Request;
use crate::clock::Millis;
use crate::model::{Endpoint, SignatureHeaders};
use crate::signing as sign;

/// What is being sent: an event's delivery, or a verification challenge.
pub struct Message<'a> {
    /// `webhook-id`: the event id (the receiver's dedup key).
    pub id: &'a str,
    pub event_type: &'a str,
    pub attempt: u32,
    pub delivery_id: Option<&'a str>,
    /// The trace context the request carries as `traceparent` and `tracestate`, when its
    /// endpoint propagates the trace (docs/operations.md, "Traces").
    pub trace: Option<&'a crate::trace::TraceContext>,
}

pub struct Built {
    pub request: Request,
    /// The headers as the delivery log shows them (macros unexpanded).
    pub recorded: Vec<(String, String)>,
    /// Problems worth telling the operator (an account secret a macro names is not set).
    pub warnings: Vec<String>,
}

/// Builds the request. `secret` looks up an account secret by name for the macros.
pub fn build(
    endpoint: &Endpoint,
    msg: &Message<'_>,
    payload: Bytes,
    at: Millis,
    hex_header: Option<&HeaderName>,
    secret: impl Fn(&str) -> Option<String>,
) -> Result<Built, String> {
    let url =
        url::Url::parse(&endpoint.url).map_err(|e| format!("endpoint url is invalid: {e}"))?;
    let mut headers = protocol_headers(endpoint, msg, &payload, at, hex_header);
    let mut recorded: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.clone()))
        .collect();
    let mut warnings = Vec::new();
    for (k, v) in &endpoint.headers {
        // A name reserved after the endpoint stored it (herald warns of it at start).
        if crate::trace::is_trace_header(k) {
            continue;
        }
        let Ok(name) = HeaderName::from_bytes(k.as_bytes()) else {
            continue;
        };
        let (value, missing) = expand_macros(v, &secret);
        for m in missing {
            warnings.push(format!("header {k}: account secret {m:?} is not set"));
        }
        recorded.push((k.clone(), v.clone()));
        headers.push((name, value));
    }
    let headers = headers
        .into_iter()
        .filter_map(|(k, v)| HeaderValue::from_str(&v).ok().map(|v| (k, v)))
        .collect();
    Ok(Built {
        request: Request {
            url,
            headers,
            body: payload,
            identity: None,
        },
        recorded,
        warnings,
    })
}

/// The headers herald sets on every request: the content type, its user agent, the Standard
/// Webhooks trio (and Svix's names for it when the endpoint asks), herald's own, and the
/// `sha256-hex` scheme's header when that scheme is on.
fn protocol_headers(
    endpoint: &Endpoint,
    msg: &Message<'_>,
    payload: &Bytes,
    at: Millis,
    hex_header: Option<&HeaderName>,
) -> Vec<(HeaderName, String)> {
    let timestamp = at.div_euclid(1000);
    let signature =
        sign::signature_header(endpoint.signing_secrets(at), msg.id, timestamp, payload);
    let mut headers: Vec<(HeaderName, String)> = vec![
        (CONTENT_TYPE, "application/json".into()),
        (USER_AGENT, format!("herald/{}", crate::VERSION)),
        (HeaderName::from_static("webhook-id"), msg.id.to_string()),
        (
            HeaderName::from_static("webhook-timestamp"),
            timestamp.to_string(),
        ),
        (HeaderName::from_static("webhook-signature"), signature),
        (
            HeaderName::from_static("herald-event-type"),
            msg.event_type.to_string(),
        ),
        (
            HeaderName::from_static("herald-attempt"),
            msg.attempt.to_string(),
        ),
    ];
    if endpoint.signature_headers == SignatureHeaders::WebhookAndSvix {
        // The same three values under the names receivers written for Svix read (docs/svix.md).
        let same: Vec<String> = headers[2..5].iter().map(|(_, v)| v.clone()).collect();
        for (name, v) in ["svix-id", "svix-timestamp", "svix-signature"]
            .into_iter()
            .zip(same)
        {
            headers.push((HeaderName::from_static(name), v));
        }
    }
    if let Some(id) = msg.delivery_id {
        headers.push((
            HeaderName::from_static("herald-delivery-id"),
            id.to_string(),
        ));
    }
    headers.push((
        HeaderName::from_static("herald-endpoint-id"),
        endpoint.id.clone(),
    ));
    if let Some(t) = msg.trace {
        headers.push((HeaderName::from_static("traceparent"), t.traceparent()));
        if let Some(state) = &t.tracestate {
            headers.push((HeaderName::from_static("tracestate"), state.clone()));
        }
    }
    let symmetric = endpoint
        .signing_secrets(at)
        .find(|s| !s.starts_with(sign::SIGNING_KEY_PREFIX));
    if let (Some(name), Some(s)) = (hex_header, symmetric) {
        let hex = sign::hex_hmac(&sign::secret_key(s), payload);
        headers.push((name.clone(), format!("sha256={hex}")));
    }
    headers
}

/// The account secrets the endpoint's header macros name (each once).
pub fn secret_names(endpoint: &Endpoint) -> Vec<String> {
    let named = std::cell::RefCell::new(Vec::<String>::new());
    for v in endpoint.headers.values() {
        if v.contains("{{") {
            expand_macros(v, |name: &str| {
                let mut named = named.borrow_mut();
                if !named.iter().any(|n| n == name) {
                    named.push(name.to_string());
                }
                None
            });
        }
    }
    named.into_inner()
}

/// Replaces each `{{ secret.NAME }}` (spaces inside the braces optional) with the account
/// secret `NAME`; returns the value and the names that had no secret (replaced by nothing).
/// Anything else between braces is left as written.
pub fn expand_macros(
    value: &str,
    secret: impl Fn(&str) -> Option<String>,
) -> (String, Vec<String>) {
    let mut out = String::with_capacity(value.len());
    let mut missing = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start + 2..].find("}}") else {
            break;
        };
        let inner = rest[start + 2..start + 2 + len].trim();
        out.push_str(&rest[..start]);
        match inner.strip_prefix("secret.") {
            Some(name) if is_secret_name(name) => match secret(name) {
                Some(v) => out.push_str(&v),
                None => missing.push(name.to_string()),
            },
            _ => out.push_str(&rest[start..start + 4 + len]),
        }
        rest = &rest[start + 4 + len..];
    }
    out.push_str(rest);
    (out, missing)
}

/// True if a header value asks for an account secret: `{{`, optional white space, `secret.`.
/// Wider than what [`expand_macros`] replaces (any name, closed or not), so that nothing it
/// would expand escapes a check built on this.
pub fn mentions_secret(value: &str) -> bool {
    let mut rest = value;
    while let Some(start) = rest.find("{{") {
        // One byte on, not two: `{{{ secret.X }}` holds a `{{` that starts at its second brace.
        rest = &rest[start + 1..];
        if rest[1..].trim_start().starts_with("secret.") {
            return true;
        }
    }
    false
}

/// Account secret names: letters, digits and `_`; those starting with `_` are reserved.
pub fn is_secret_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        (name == "API_KEY").then(|| "s3cr3t".to_string())
    }

    #[test]
    fn macros_expand_with_or_without_spaces() {
        assert_eq!(
            expand_macros("Bearer {{ secret.API_KEY }}", lookup),
            ("Bearer s3cr3t".to_string(), vec![])
        );
        assert_eq!(
            expand_macros("{{secret.API_KEY}}-{{ secret.API_KEY }}", lookup),
            ("s3cr3t-s3cr3t".to_string(), vec![])
        );
    }

    #[test]
    fn unknown_secrets_are_reported_and_other_braces_kept() {
        assert_eq!(
            expand_macros("x {{ secret.NOPE }} y", lookup),
            ("x  y".to_string(), vec!["NOPE".to_string()])
        );
        assert_eq!(
            expand_macros("{{ other }} {{ secret.bad-name }} {{", lookup),
            ("{{ other }} {{ secret.bad-name }} {{".to_string(), vec![])
        );
    }

    #[test]
    fn secret_mentions_cover_every_form_that_expands() {
        let lookup = |_: &str| Some("SECRET".to_string());
        for v in [
            "{{ secret.API_KEY }}",
            "{{secret.API_KEY}}",
            "Bearer {{\tsecret.X}}",
            "{{ x }}{{ secret.X }}",
        ] {
            assert!(expand_macros(v, lookup).0.contains("SECRET"), "{v}");
            assert!(mentions_secret(v), "{v}");
        }
        // Wider than what expands: unclosed, bad names, a third brace.
        for v in [
            "{{{ secret.X }}",
            "a {{ b }} {{  secret.x",
            "{{ secret.bad-name }}",
        ] {
            assert!(mentions_secret(v), "{v}");
        }
        for v in [
            "Bearer abc",
            "{{ other }}",
            "{ secret.X }",
            "secret.X",
            "{{ secrets.X }}",
        ] {
            assert!(!mentions_secret(v), "{v}");
        }
    }
}
