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

/// Checks an account id already in string form (also the path segment of account routes), for
/// a request that may create the account or write to it.
///
/// `.` and `..` are refused: a browser or proxy resolves them as path segments, so the
/// account's portal pages and routes could never be reached.
pub fn account_id_str(field: &str, s: &str) -> Result<(), ApiError> {
    account_id_lookup(field, s)?;
    if s == "." || s == ".." {
        return Err(ApiError::field(
            field,
            format!("{field} must not be \".\" or \"..\" (they read as path segments)"),
        ));
    }
    Ok(())
}

/// Checks an account id that a read names. It admits `.` and `..`, which no request can create
/// any more, so that the admin can still read an account an older version accepted (see
/// docs/operations.md).
pub fn account_id_lookup(field: &str, s: &str) -> Result<(), ApiError> {
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
            // Hop-by-hop names (docs/api.md): they would change how the request travels.
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

/// How deep a payload may nest: the payload object is level 1, and each object or array inside
/// adds one (docs/api.md). Deeper JSON breaks parsers downstream (receivers' and the pages').
pub const MAX_PAYLOAD_DEPTH: usize = 64;

/// True if JSON text, already known to be valid, nests objects and arrays deeper than `max`
/// levels. One pass over the bytes, nothing parsed or allocated, so the payload stays as sent.
pub fn nests_deeper_than(json: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut bytes = json.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'"' => {
                // Skip the string: brackets inside it are text. Valid JSON means every escape
                // is a backslash and one more byte (the \u form's digits hold no quote).
                while let Some(&c) = bytes.next() {
                    match c {
                        b'\\' => {
                            bytes.next();
                        }
                        b'"' => break,
                        _ => {}
                    }
                }
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
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
            json!("."),
            json!(".."),
        ] {
            let e = account_id("account_id", &bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("account_id"), "{bad}");
        }
        assert_eq!(account_id("account_id", &json!("...")).unwrap(), "...");
        assert_eq!(account_id("account_id", &json!(".a")).unwrap(), ".a");
        assert!(account_id_lookup("account_id", "..").is_ok());
    }

    #[test]
    fn nesting_depth_counts_objects_and_arrays_but_not_strings() {
        let nested = |levels: usize| "[".repeat(levels - 1) + "1" + &"]".repeat(levels - 1);
        let payload = |levels: usize| format!("{{\"a\":{}}}", nested(levels));
        // The payload object is level 1.
        assert!(!nests_deeper_than(b"{}", 1));
        assert!(nests_deeper_than(b"{\"a\":{}}", 1));
        assert!(!nests_deeper_than(payload(64).as_bytes(), 64));
        assert!(nests_deeper_than(payload(65).as_bytes(), 64));
        assert!(nests_deeper_than(payload(100_000).as_bytes(), 64));
        // Brackets inside strings, escaped quotes and backslashes are text.
        let text = format!("{{\"s\":\"{}\\\"\\\\\",\"t\":[[]]}}", "[{".repeat(100));
        assert!(serde_json::from_str::<Value>(&text).is_ok(), "{text}");
        assert!(!nests_deeper_than(text.as_bytes(), 3));
        assert!(nests_deeper_than(text.as_bytes(), 2));
        // Siblings do not add up.
        let wide = format!("{{{}\"z\":1}}", "\"a\":[[1]],".repeat(100));
        assert!(!nests_deeper_than(wide.as_bytes(), 3));
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
