//! Reading request bodies: content type, size cap, and JSON errors that name line and column.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, StatusCode};

use super::error::ApiError;
use super::server::RequestDeadline;

/// A refused body is still read and dropped, up to this many bytes within [`DRAIN_TIME`], before
/// the error is sent: a server that answers and closes while the client is still writing makes
/// the kernel reset the connection, and the client then sees a broken pipe instead of our `413`.
const DRAIN_BYTES: usize = 8 * 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// The body bytes, if the request is JSON and within `max` bytes.
pub async fn read_json_body(req: Request<Incoming>, max: usize) -> Result<bytes::Bytes, ApiError> {
    let ct = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mime = ct.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        discard_body(req).await;
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("Content-Type must be application/json (got {ct:?})"),
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
        discard_body(req).await;
        return Err(too_large());
    }
    let deadline = deadline(&req);
    let mut body = req.into_body();
    let read = async {
        let mut buf = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("cannot read the request body: {e}"),
                )
            })?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > max {
                    return Err(too_large());
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(buf.freeze())
    };
    match tokio::time::timeout_at(deadline, read).await {
        Ok(Err(e)) if e.status == StatusCode::PAYLOAD_TOO_LARGE => {
            drain_until(body, deadline).await;
            Err(e)
        }
        Ok(result) => result,
        Err(_) => Err(ApiError::request_timeout()),
    }
}

/// When the request must have fully arrived ([`RequestDeadline`]); requests made without the
/// server (tests) have none and get a minute.
fn deadline(req: &Request<Incoming>) -> tokio::time::Instant {
    req.extensions()
        .get::<RequestDeadline>()
        .map(|d| d.0)
        .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(60))
}

/// The body of an action whose body is optional, parsed as [`parse`] does; an empty body
/// (which needs no content type) is `T::default()`.
pub async fn parse_optional<T: serde::de::DeserializeOwned + Default>(
    req: Request<Incoming>,
    max: usize,
) -> Result<T, ApiError> {
    let bytes = read_optional_json(req, max).await?;
    if bytes.is_empty() {
        Ok(T::default())
    } else {
        parse(&bytes)
    }
}

/// Like `read_json_body`, but an empty body needs no content type (actions with optional bodies).
async fn read_optional_json(req: Request<Incoming>, max: usize) -> Result<bytes::Bytes, ApiError> {
    let empty = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() == b"0")
        || (!req.headers().contains_key(hyper::header::CONTENT_LENGTH)
            && !req.headers().contains_key(hyper::header::TRANSFER_ENCODING));
    if empty {
        discard_body(req).await;
        Ok(bytes::Bytes::new())
    } else {
        read_json_body(req, max).await
    }
}

/// A body for routes without one: read and dropped (keeps the connection usable).
pub async fn discard_body(req: Request<Incoming>) {
    let deadline = deadline(&req);
    drain_until(req.into_body(), deadline).await;
}

/// Reads and drops up to [`DRAIN_BYTES`] for at most [`DRAIN_TIME`], and never past the
/// request's deadline.
async fn drain_until(mut body: Incoming, deadline: tokio::time::Instant) {
    let work = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > DRAIN_BYTES {
                return;
            }
        }
    };
    let until = deadline.min(tokio::time::Instant::now() + DRAIN_TIME);
    let _ = tokio::time::timeout_at(until, work).await;
}

/// Parses a JSON object body. Syntax errors are `400 malformed_json` with line and column; a body
/// that is valid JSON of the wrong shape is `422 invalid_field` naming the field (`body` when the
/// body itself is not an object: serde would otherwise read a struct from an array by position).
pub fn parse<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Err(e) => json_error(e, ""),
                Ok(_) => ApiError::field("body", "the body must be a JSON object"),
            },
        );
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        json_error(e.into_inner(), &path)
    })?;
    de.end().map_err(|e| json_error(e, ""))?;
    Ok(value)
}

/// Maps a serde_json error; `path` is where in the document it happened (`.` for the top).
fn json_error(e: serde_json::Error, path: &str) -> ApiError {
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
            let named = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.starts_with("unknown field") || msg.starts_with("missing field"));
            let field = match (named, path) {
                (Some(name), _) => name,
                (None, "" | ".") => "body",
                (None, p) => p,
            };
            ApiError::field(field, format!("{field}: {msg}"))
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

/// For `#[serde(default, deserialize_with = "body::present")]`: a field that is there, `null`
/// included, is `Some`; only an absent one is `None` (absent keeps a setting, `null` removes it).
pub fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}
