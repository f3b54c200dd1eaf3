//! Field checks shared by the handlers. Each error names its field.

use serde_json::value::RawValue;
use serde_json::Value;

use super::error::ApiError;

const MAX_ID_LEN: usize = 128;

/// An account id: a non-empty string, or a JSON integer normalized to its decimal string.
pub fn account_id(field: &str, v: &Value) -> Result<String, ApiError> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
        Value::Number(_) => {
            return Err(ApiError::field(
                field,
                format!("{field} must be a string or an integer, not a fraction"),
            ))
        }
        _ => {
            return Err(ApiError::field(
                field,
                format!("{field} must be a string or an integer"),
            ))
        }
    };
    account_id_str(field, &s)?;
    Ok(s)
}

/// Checks an account id already in string form (also the path segment of account routes).
pub fn account_id_str(field: &str, s: &str) -> Result<(), ApiError> {
    if s.is_empty() || s.len() > MAX_ID_LEN {
        return Err(ApiError::field(
            field,
            format!("{field} must be 1 to {MAX_ID_LEN} characters"),
        ));
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.:@".contains(&b))
    {
        return Err(ApiError::field(
            field,
            format!("{field} may contain only letters, digits and - _ . : @"),
        ));
    }
    if s.starts_with('_') {
        return Err(ApiError::field(
            field,
            format!("{field}: account ids starting with _ are reserved for herald"),
        ));
    }
    Ok(())
}

/// An event type such as `interaction.review`.
pub fn event_type(field: &str, s: &str) -> Result<(), ApiError> {
    if s.is_empty() || s.len() > MAX_ID_LEN {
        return Err(ApiError::field(
            field,
            format!("{field} must be 1 to {MAX_ID_LEN} characters"),
        ));
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    {
        return Err(ApiError::field(
            field,
            format!("{field} may contain only letters, digits and - _ . :"),
        ));
    }
    Ok(())
}

/// An event-type filter pattern: a type, `prefix.*`, or `*`.
pub fn type_pattern(field: &str, s: &str) -> Result<(), ApiError> {
    match s.strip_suffix('*') {
        Some("") => Ok(()),
        Some(prefix) if prefix.ends_with('.') => event_type(field, prefix.trim_end_matches('.')),
        Some(_) => Err(ApiError::field(
            field,
            format!("{field}: a wildcard must follow a dot, as in \"interaction.*\""),
        )),
        None => event_type(field, s),
    }
}

/// A string field of bounded length.
pub fn bounded_string(field: &str, v: &Value, max: usize) -> Result<String, ApiError> {
    match v {
        Value::String(s) if s.chars().count() <= max => Ok(s.clone()),
        Value::String(_) => Err(ApiError::field(
            field,
            format!("{field} must be at most {max} characters"),
        )),
        _ => Err(ApiError::field(field, format!("{field} must be a string"))),
    }
}

/// Header names herald sets itself, which an endpoint's custom headers may not override.
pub fn is_reserved_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "content-type"
            | "content-length"
            | "host"
            | "transfer-encoding"
            | "connection"
            | "user-agent"
            // Hop-by-hop names (SPEC §7): they would change how the request travels.
            | "upgrade"
            | "expect"
            | "te"
            | "trailer"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "proxy-authenticate"
    ) || n.starts_with("webhook-")
        || n.starts_with("herald-")
}

/// True if a raw JSON value is an object (the payload must be one).
pub fn is_object(raw: &RawValue) -> bool {
    raw.get().trim_start().starts_with('{')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn account_ids_normalize_numbers_and_reject_the_rest() {
        assert_eq!(account_id("account_id", &json!(11073)).unwrap(), "11073");
        assert_eq!(account_id("account_id", &json!("11073")).unwrap(), "11073");
        for bad in [
            json!(1.5),
            json!(""),
            json!(null),
            json!([1]),
            json!("a b"),
            json!("_operator"),
            json!("x/y"),
        ] {
            let e = account_id("account_id", &bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("account_id"), "{bad}");
        }
    }

    #[test]
    fn reserved_headers() {
        for h in [
            "Content-Type",
            "host",
            "Webhook-Id",
            "herald-attempt",
            "Connection",
            "User-Agent",
            "Upgrade",
            "Expect",
            "TE",
            "Trailer",
            "Keep-Alive",
            "Proxy-Connection",
            "Proxy-Authorization",
            "proxy-authenticate",
        ] {
            assert!(is_reserved_header(h), "{h}");
        }
        assert!(!is_reserved_header("x-api-key"));
    }

    #[test]
    fn type_patterns() {
        assert!(type_pattern("f", "*").is_ok());
        assert!(type_pattern("f", "interaction.*").is_ok());
        assert!(type_pattern("f", "interaction.review").is_ok());
        assert!(type_pattern("f", "inter*").is_err());
        assert!(type_pattern("f", "").is_err());
    }
}
