//! The portal (`/portal`, for the platform's customers) and the console (`/console`, for the
//! operator), served from the binary (README.md). The pages hold no data: every datum comes
//! from the JSON API with the token the page keeps in `sessionStorage`.
//!
//! Safety headers on every page and asset: a Content-Security-Policy with no inline script or
//! style (`default-src 'self'`), `frame-ancestors` from `portal.frame_ancestors` for the portal
//! (none by default: it cannot be framed) and always `'none'` for the console, `nosniff`,
//! `no-referrer`. Assets carry an `ETag` (a hash of their bytes) and are answered `304` when
//! the browser has them. Text assets are gzipped once, the first time any is asked for, and
//! sent so to a browser that accepts gzip (`Vary: Accept-Encoding`). The portal's own look
//! (`/assets/theme.css`, `/assets/logo`) is prepared at start ([`super::look`]).

use std::io::Write;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{
    HeaderValue, ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_TYPE, ETAG,
    IF_NONE_MATCH, LOCATION, VARY,
};
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
    script!("filter-editor.js"),
    script!("view-deliveries.js"),
    script!("view-delivery.js"),
    script!("view-catalog.js"),
    script!("view-alerts.js"),
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/app.css"),
    },
    Asset {
        name: "icon.svg",
        content_type: "image/svg+xml",
        bytes: include_bytes!("../../assets/icon.svg"),
    },
];

/// An answer's bytes prepared once: its `ETag`, and its gzipped form when that is smaller.
pub struct Prepared {
    content_type: &'static str,
    bytes: Bytes,
    etag: String,
    gzip: Option<(Bytes, String)>,
}

impl Prepared {
    /// `compress`: text worth gzipping (HTML, JavaScript, CSS, SVG).
    pub fn new(content_type: &'static str, bytes: Bytes, compress: bool) -> Prepared {
        let tag = etag(&bytes, "");
        let gzip = compress
            .then(|| gzip(&bytes))
            .flatten()
            .filter(|gz| gz.len() < bytes.len())
            .map(|gz| {
                // Another representation, another tag (a cache must not mix the two).
                let tag = etag(&bytes, "-gzip");
                (Bytes::from(gz), tag)
            });
        Prepared {
            content_type,
            bytes,
            etag: tag,
            gzip,
        }
    }
}

/// The compiled-in assets, prepared the first time one is asked for (never per request).
static PREPARED: LazyLock<Vec<Prepared>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| Prepared::new(a.content_type, Bytes::from_static(a.bytes), true))
        .collect()
});

fn gzip(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).ok()?;
    enc.finish().ok()
}

/// Which Content-Security-Policy an answer carries.
#[derive(Debug, Clone, Copy)]
pub enum Policy<'a> {
    /// A page or one of its assets, framed only by these origins (none: never framed).
    Page { frame_ancestors: &'a [String] },
    /// The operator's logo as an image: an SVG opened on its own runs nothing and loads nothing.
    Image,
}

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
    let (name, frame_ancestors) = match page {
        Page::Portal => (
            "portal.html",
            state.config.portal.frame_ancestors.as_slice(),
        ),
        // The operator's page is never framed, whatever the portal allows (clickjacking).
        Page::Console => ("console.html", &[][..]),
    };
    match prepared(name) {
        Some(a) => serve(req, a, Policy::Page { frame_ancestors }),
        None => ApiError::not_found("page").into_response(),
    }
}

/// `GET /assets/{file}`: the compiled-in assets, and the portal's look (`theme.css`, `logo`).
pub fn asset(state: &Arc<AppState>, req: &Request<Incoming>, file: &str) -> Resp {
    let page = Policy::Page {
        frame_ancestors: &state.config.portal.frame_ancestors,
    };
    match file {
        "theme.css" => return serve(req, &state.look.theme, page),
        "logo" => {
            return match &state.look.logo {
                Some(logo) => serve(req, logo, Policy::Image),
                None => ApiError::not_found("logo").into_response(),
            }
        }
        _ => {}
    }
    // The HTML pages are served at their own paths only.
    match prepared(file).filter(|_| !file.ends_with(".html")) {
        Some(a) => serve(req, a, page),
        None => ApiError::not_found("asset").into_response(),
    }
}

fn prepared(name: &str) -> Option<&'static Prepared> {
    let i = ASSETS.iter().position(|a| a.name == name)?;
    PREPARED.get(i)
}

/// Whether the request's `Accept-Encoding` takes gzip (`gzip`, `x-gzip` or `*` without `q=0`).
fn accepts_gzip(req: &Request<Incoming>) -> bool {
    let Some(v) = req
        .headers()
        .get(ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    v.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or_default().to_ascii_lowercase();
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        matches!(coding.as_str(), "gzip" | "x-gzip" | "*") && !refused
    })
}

fn serve(req: &Request<Incoming>, a: &Prepared, policy: Policy<'_>) -> Resp {
    let (bytes, etag, gzipped) = match &a.gzip {
        Some((gz, tag)) if accepts_gzip(req) => (gz, tag, true),
        _ => (&a.bytes, &a.etag, false),
    };
    let fresh = req
        .headers()
        .get(IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut resp = if fresh {
        let mut r = Response::new(super::full(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        Response::new(super::full(bytes.clone()))
    };
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(ETAG, v);
    }
    if a.gzip.is_some() {
        h.insert(VARY, HeaderValue::from_static("accept-encoding"));
    }
    if gzipped && !fresh {
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    // Revalidated every time: an upgraded herald's pages are used at once.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    match policy {
        Policy::Page { frame_ancestors } => safety_headers(h, frame_ancestors),
        Policy::Image => {
            h.insert(
                "content-security-policy",
                HeaderValue::from_static(
                    "default-src 'none'; style-src 'unsafe-inline'; sandbox; \
                     frame-ancestors 'none'",
                ),
            );
            h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
        }
    }
    resp
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

fn etag(bytes: &[u8], variant: &str) -> String {
    let d = Sha256::digest(bytes);
    let hex: String = d[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}{variant}\"")
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
