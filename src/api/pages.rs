//! The portal (`/portal`, for the platform's customers) and the console (`/console`, for the
//! operator), served from the binary (README.md). The pages hold no data: every datum comes
//! from the JSON API with the token the page keeps in `sessionStorage`.
//!
//! Safety headers on every page and asset: a Content-Security-Policy with no inline script or
//! style (`default-src 'self'`), `frame-ancestors` from `portal.frame_ancestors` (none by
//! default: the pages cannot be framed), `nosniff`, `no-referrer`. Assets carry an `ETag` (a
//! hash of their bytes) and are answered `304` when the browser has them.

use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LOCATION};
use hyper::{Request, Response, StatusCode};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::{AppState, Resp};

/// The pages and their assets, compiled in.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

/// One of the pages' ES modules (`assets/app.js` is the entry; it imports the others).
macro_rules! script {
    ($name:literal) => {
        Asset {
            name: $name,
            content_type: "text/javascript; charset=utf-8",
            bytes: include_bytes!(concat!("../../assets/", $name)),
        }
    };
}

const ASSETS: &[Asset] = &[
    Asset {
        name: "portal.html",
        content_type: "text/html; charset=utf-8",
        bytes: include_bytes!("../../assets/portal.html"),
    },
    Asset {
        name: "console.html",
        content_type: "text/html; charset=utf-8",
        bytes: include_bytes!("../../assets/console.html"),
    },
    script!("app.js"),
    script!("state.js"),
    script!("dom.js"),
    script!("format.js"),
    script!("api.js"),
    script!("pieces.js"),
    script!("shell.js"),
    script!("chart.js"),
    script!("view-overview.js"),
    script!("view-endpoints.js"),
    script!("view-endpoint-form.js"),
    script!("view-deliveries.js"),
    script!("view-delivery.js"),
    script!("view-catalog.js"),
    script!("view-alerts.js"),
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/app.css"),
    },
];

/// All assets together stay within this (README.md, "The portal and the console": at most 300 KB).
#[cfg(test)]
const ASSET_BUDGET: usize = 300 * 1000;

#[derive(Debug, Clone, Copy)]
pub enum Page {
    Portal,
    Console,
}

/// `GET /`: the console.
pub fn root() -> Resp {
    let mut resp = Response::new(super::full(Bytes::new()));
    *resp.status_mut() = StatusCode::FOUND;
    resp.headers_mut()
        .insert(LOCATION, HeaderValue::from_static("/console"));
    resp
}

pub fn page(state: &Arc<AppState>, req: &Request<Incoming>, page: Page) -> Resp {
    let name = match page {
        Page::Portal => "portal.html",
        Page::Console => "console.html",
    };
    serve(state, req, name).unwrap_or_else(|e| e.into_response())
}

/// `GET /assets/{file}`.
pub fn asset(state: &Arc<AppState>, req: &Request<Incoming>, file: &str) -> Resp {
    // The HTML pages are served at their own paths only.
    let found = ASSETS
        .iter()
        .any(|a| a.name == file && !a.name.ends_with(".html"));
    if !found {
        return ApiError::not_found("asset").into_response();
    }
    serve(state, req, file).unwrap_or_else(|e| e.into_response())
}

fn serve(state: &AppState, req: &Request<Incoming>, name: &str) -> Result<Resp, ApiError> {
    let a = ASSETS
        .iter()
        .find(|a| a.name == name)
        .ok_or_else(|| ApiError::not_found("asset"))?;
    let etag = etag(a.bytes);
    let fresh = req
        .headers()
        .get(IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut resp = if fresh {
        let mut r = Response::new(super::full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        Response::new(super::full(Bytes::from_static(a.bytes)))
    };
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(ETAG, v);
    }
    // Revalidated every time: an upgraded herald's pages are used at once.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    safety_headers(h, &state.config.portal.frame_ancestors);
    Ok(resp)
}

/// The headers every page and asset carries.
pub fn safety_headers(h: &mut hyper::HeaderMap, frame_ancestors: &[String]) {
    let ancestors = if frame_ancestors.is_empty() {
        "'none'".to_string()
    } else {
        frame_ancestors.join(" ")
    };
    let csp = format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
         frame-ancestors {ancestors}"
    );
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert("content-security-policy", v);
    }
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
}

fn etag(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let hex: String = d[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_assets_fit_their_budget_and_hold_no_inline_code() {
        let total: usize = ASSETS.iter().map(|a| a.bytes.len()).sum();
        assert!(total <= ASSET_BUDGET, "{total} bytes of assets");
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".html")) {
            let html = std::str::from_utf8(a.bytes).unwrap();
            // CSP forbids inline script and style: the pages must not need them.
            assert!(!html.contains("<script>"), "{}: inline script", a.name);
            assert!(!html.contains("<style"), "{}: inline style", a.name);
            assert!(
                !html.contains(" style="),
                "{}: inline style attribute",
                a.name
            );
            let handler = html.match_indices(" on").any(|(i, _)| {
                let rest = &html[i + 3..];
                let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
                !name.is_empty() && rest[name.len()..].starts_with('=')
            });
            assert!(!handler, "{}: inline event handler", a.name);
        }
    }
}
