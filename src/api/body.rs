//! Reading request bodies: content type, size cap, and JSON errors that name line and column.

use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, StatusCode};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The body bytes, if the request is JSON and within `max` bytes.
pub async fn read_json_body(req: Request<Incoming>, max: usize) -> Result<bytes::Bytes, ApiError> {
    let ct = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("Content-Type must be application/json (got {:?})", ct),
        ));
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("request body is larger than server.max_body_bytes ({max} bytes)"),
        )
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), max).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_large())
        }
        Err(e) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("cannot read the request body: {e}"),
        )),
    }
}

/// A body for routes without one: read and dropped within the cap (keeps the connection usable).
pub async fn discard_body(req: Request<Incoming>, max: usize) {
    let _ = Limited::new(req.into_body(), max).collect().await;
}

/// Parses JSON; syntax errors are `400 malformed_json` with line and column, shape errors are
/// `422 invalid_field` naming the field where serde says which.
pub fn parse<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(json_error)
}

pub fn parse_owned<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(json_error)
}

pub fn json_error(e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            format!(
                "request body is not valid JSON: {} at line {} column {}",
                strip_position(&e.to_string()),
                e.line(),
                e.column()
            ),
        ),
        Category::Data => {
            let msg = strip_position(&e.to_string());
            let field = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.starts_with("unknown field") || msg.starts_with("missing field"))
                .unwrap_or("body")
                .to_string();
            ApiError::field(
                &field,
                format!("{msg} (line {} column {})", e.line(), e.column()),
            )
        }
    }
}

/// serde_json appends " at line L column C"; the messages above say it their own way.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}
