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
    ) || crate::trace::is_trace_header(&n)
        || n.starts_with("webhook-")
        || n.starts_with("herald-")
        || n.starts_with("svix-")
}

/// How deep a payload may nest: the payload object is level 1, and each object or array inside
/// adds one (docs/api.md). Deeper JSON breaks parsers downstream (receivers' and the pages').
pub const MAX_PAYLOAD_DEPTH: usize = 64;

/// What the byte scan of a payload found that herald refuses (docs/api.md, "Events").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadFault {
    /// Objects and arrays nest deeper than the limit.
    TooDeep,
    /// A `\uXXXX` escape of a UTF-16 surrogate without its other half (the escape's text).
    LoneSurrogate(String),
    /// A number a 64-bit float cannot hold: it overflows to infinity (its text, cut short).
    NumberOutOfRange(String),
}

impl PayloadFault {
    /// The `422` naming `field` that ingest and replay answer.
    pub fn to_error(&self, field: &str) -> ApiError {
        let message = match self {
            PayloadFault::TooDeep => format!(
                "{field} nests deeper than {MAX_PAYLOAD_DEPTH} levels of objects and arrays"
            ),
            PayloadFault::LoneSurrogate(esc) => format!(
                "{field} holds the escape {esc}, half of a UTF-16 surrogate pair without its \
                 other half; a payload must be I-JSON (RFC 7493), whose strings are Unicode"
            ),
            PayloadFault::NumberOutOfRange(n) => format!(
                "{field} holds the number {n}, outside the finite range of a 64-bit float; a \
                 payload must be I-JSON (RFC 7493): send such a number as a string"
            ),
        };
        ApiError::field(field, message)
    }
}

/// The most digits an integer may have and be finite whatever they are: 10^308 is below
/// `f64::MAX` (about 1.8 x 10^308), 10^309 above it.
const SAFE_INT_DIGITS: usize = 308;

/// Checks JSON text, already known to be valid, for what herald refuses in a payload: nesting
/// deeper than `max_depth` levels, and what I-JSON (RFC 7493) forbids, a lone surrogate escape
/// and a number outside the finite range of a 64-bit float (docs/api.md, "Events"). One pass
/// over the bytes, nothing parsed into values or allocated, so the payload stays as sent and
/// ingest pays no second parse: a number is read as a float only when it has an exponent or
/// more than [`SAFE_INT_DIGITS`] digits before its point. A payload that passes parses into a
/// `serde_json::Value`, which is what the payload filters read.
pub fn scan_payload(json: &[u8], max_depth: usize) -> Result<(), PayloadFault> {
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => i = skip_string(json, i + 1)?,
            b'{' | b'[' => {
                depth += 1;
                if depth > max_depth {
                    return Err(PayloadFault::TooDeep);
                }
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'-' | b'0'..=b'9' => i = skip_number(json, i)?,
            _ => i += 1,
        }
    }
    Ok(())
}

/// Skips the string that starts at `i` (after its opening quote); the index after its closing
/// quote. Brackets inside it are text. Valid JSON means every escape is a backslash and one
/// more byte, and `\u` is followed by four hex digits.
fn skip_string(json: &[u8], mut i: usize) -> Result<usize, PayloadFault> {
    // Where a high surrogate escape was just read: the very next escape must be its low half.
    let mut high: Option<usize> = None;
    while let Some(&b) = json.get(i) {
        if b == b'\\' && json.get(i + 1) == Some(&b'u') {
            let unit = json
                .get(i + 2..i + 6)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u16::from_str_radix(h, 16).ok())
                .unwrap_or(0);
            match (high.take(), unit) {
                (None, 0xD800..=0xDBFF) => high = Some(i),
                (Some(_), 0xDC00..=0xDFFF) | (None, 0..=0xD7FF | 0xE000..=0xFFFF) => {}
                (Some(at), _) => return Err(lone(json, at)),
                (None, _) => return Err(lone(json, i)),
            }
            i += 6;
            continue;
        }
        if let Some(at) = high {
            return Err(lone(json, at));
        }
        match b {
            b'\\' => i += 2,
            b'"' => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Ok(i)
}

fn lone(json: &[u8], at: usize) -> PayloadFault {
    let esc = json.get(at..at + 6).unwrap_or_default();
    PayloadFault::LoneSurrogate(String::from_utf8_lossy(esc).into_owned())
}

/// Skips the number that starts at `i`; the index after it. Refuses one that overflows a
/// 64-bit float (rounded to nearest, as serde_json reads it): `1e400` or a 400-digit integer,
/// not `1e-400` (which is 0) nor a 300-digit integer.
fn skip_number(json: &[u8], i: usize) -> Result<usize, PayloadFault> {
    let len = json[i..]
        .iter()
        .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
        .unwrap_or(json.len() - i);
    let text = &json[i..i + len];
    let int_digits = text
        .iter()
        .filter(|b| **b != b'-')
        .take_while(|b| b.is_ascii_digit())
        .count();
    let has_exponent = text.iter().any(|b| matches!(b, b'e' | b'E'));
    if !has_exponent && int_digits <= SAFE_INT_DIGITS {
        return Ok(i + len);
    }
    let finite = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .is_some_and(f64::is_finite);
    if finite {
        return Ok(i + len);
    }
    let shown = String::from_utf8_lossy(&text[..text.len().min(24)]);
    let cut = if text.len() > 24 { "..." } else { "" };
    Err(PayloadFault::NumberOutOfRange(format!("{shown}{cut}")))
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

    fn nests_deeper_than(json: &[u8], max: usize) -> bool {
        scan_payload(json, max) == Err(PayloadFault::TooDeep)
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
    fn lone_surrogate_escapes_are_refused_and_pairs_kept() {
        let scan = |text: &str| scan_payload(text.as_bytes(), 64);
        let lone = |esc: &str| Err(PayloadFault::LoneSurrogate(esc.into()));
        assert_eq!(scan(r#"{"s":"\ud800"}"#), lone(r"\ud800"));
        assert_eq!(scan(r#"{"s":"a\uDBFFb"}"#), lone(r"\uDBFF"));
        assert_eq!(scan(r#"{"s":"\udc00"}"#), lone(r"\udc00"));
        assert_eq!(scan(r#"{"s":"\ud800\ud800\udc00"}"#), lone(r"\ud800"));
        assert_eq!(scan(r#"{"s":"\ud800\n"}"#), lone(r"\ud800"));
        assert_eq!(scan(r#"{"\ud800":1}"#), lone(r"\ud800"));
        for good in [
            r#"{"s":"\ud83d\ude00"}"#,
            r#"{"s":"\u00e9\uffff\u0000\\ud800"}"#,
            r#"{"s":"😀 \"\ud800\udfff"}"#,
        ] {
            assert_eq!(scan(good), Ok(()), "{good}");
            assert!(serde_json::from_str::<Value>(good).is_ok(), "{good}");
        }
    }

    #[test]
    fn numbers_outside_the_finite_range_of_a_float_are_refused() {
        let scan = |text: String| scan_payload(text.as_bytes(), 64);
        let out = |n: &str| Err(PayloadFault::NumberOutOfRange(n.into()));
        assert_eq!(scan(r#"{"n":1e400}"#.into()), out("1e400"));
        assert_eq!(scan(r#"{"n":[-1E+309]}"#.into()), out("-1E+309"));
        let digits = |n: usize| "9".repeat(n);
        assert_eq!(
            scan(format!(r#"{{"n":{}}}"#, digits(400))),
            out(&format!("{}...", digits(24)))
        );
        assert!(scan(format!(r#"{{"n":{}.5}}"#, digits(309))).is_err());
        // Above f64::MAX but rounded to it: finite. Just past halfway to the next power: not.
        let fine = [
            format!(r#"{{"n":{}}}"#, digits(300)),
            format!(r#"{{"n":-{}.5e-10}}"#, digits(310)),
            r#"{"n":1e-400,"m":1.7976931348623157e308,"k":1.7976931348623158e308}"#.into(),
            r#"{"n":"1e400","m":[0,-0,0.5e0,12E-3]}"#.into(),
        ];
        for good in fine {
            assert_eq!(scan(good.clone()), Ok(()), "{good}");
            assert!(serde_json::from_str::<Value>(&good).is_ok(), "{good}");
        }
        assert!(scan(r#"{"n":1.7976931348623159e308}"#.into()).is_err());
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
            "traceparent",
            "TraceState",
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
