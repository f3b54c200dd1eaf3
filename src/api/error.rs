//! The API's one error shape: `{"error": {"code", "message", "field"?, "reason"?}}` with a
//! status code. `reason` names which rule a field broke, from a listed set (docs/api.md,
//! "Errors"), for clients that show their own words.
//!
//! Internal detail (storage errors and the like) is logged where it happens and never put in a
//! message: the caller gets a sentence it can act on.

use hyper::StatusCode;
use serde_json::json;

use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    pub reason: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            reason: None,
        }
    }

    /// The same error, naming the rule the field broke.
    pub fn because(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }

    /// `422 invalid_field` naming the field.
    pub fn field(field: &str, message: impl Into<String>) -> Self {
        ApiError {
            field: Some(field.to_string()),
            ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", message)
        }
    }

    pub fn not_found(what: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong token: send Authorization: Bearer <token> with a token allowed on this route",
        )
    }

    /// `403 read_only`: a read-only portal session asked to change something.
    pub fn read_only() -> Self {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            "this portal session is read-only: it can look but not change anything",
        )
    }

    /// `408`: the request did not fully arrive within `server.request_timeout`; the connection
    /// is closed after this answer.
    pub fn request_timeout() -> Self {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request did not arrive within server.request_timeout; the connection is closed",
        )
    }

    pub fn unavailable() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "storage is unavailable or herald is shutting down; nothing was stored, try again",
        )
    }

    pub fn body(&self) -> serde_json::Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(f) = &self.field {
            e["field"] = json!(f);
        }
        if let Some(r) = self.reason {
            e["reason"] = json!(r);
        }
        json!({ "error": e })
    }

    pub fn into_response(self) -> super::Resp {
        let mut resp = super::json(self.status, &self.body());
        if self.status == StatusCode::REQUEST_TIMEOUT {
            resp.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        if let StoreError::TooLarge { what, size, max } = e {
            return ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "too_large",
                format!("{what} would take {size} bytes stored; at most {max}: shorten it"),
            );
        }
        // A fan-out that stayed stale was told of by the store (not a storage failure).
        if !matches!(e, StoreError::Stale) {
            tracing::error!(error = %e, "storage error in a request");
        }
        ApiError::unavailable()
    }
}
