//! The portal's own look and how the pages are served (README.md, "Branding"; docs/api.md,
//! "The pages"): `/assets/theme.css`, `/assets/logo`, the brand in `GET /v1/session`, the
//! console's framing policy, gzip, and `HEAD`.

use crate::common;

use std::io::Read;
use std::path::Path;

use common::herald::ADMIN_TOKEN;
use common::World;

const SVG_LOGO: &str = "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
                        viewBox=\"0 0 10 10\"><rect width=\"10\" height=\"10\" fill=\"#0b7a53\"/></svg>\n";
/// The smallest PNG: 1×1, one grey pixel.
const PNG_LOGO: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x7e, 0x9b,
    0x55, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x60, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x01, 0x48, 0xaf, 0xa4, 0x71, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A herald whose `[portal]` has `keys`, with `logo` written beside its config as `file`.
async fn branded(keys: &str, logo: Option<(&str, &[u8])>, dir: &Path) -> World {
    branded_with(keys, logo, dir, "").await
}

/// [`branded`], with `tables` after the `[portal]` table.
async fn branded_with(keys: &str, logo: Option<(&str, &[u8])>, dir: &Path, tables: &str) -> World {
    let mut portal = format!("[portal]\n{keys}");
    if let Some((file, bytes)) = logo {
        let path = dir.join(file);
        std::fs::write(&path, bytes).expect("write the logo");
        portal.push_str(&format!(
            "logo_file = {}\n",
            common::toml_string(&path.display().to_string())
        ));
    }
    portal.push_str(tables);
    World::start("", &portal).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn theme_css_carries_the_accent_and_herald_colours_without_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let w = branded("accent = \"#0B7A53\"\n", None, dir.path()).await;
    let (status, headers, css) = w
        .herald
        .call_raw("GET", "/assets/theme.css", None, &[], Vec::new())
        .await;
    let css = String::from_utf8(css).expect("CSS is text");
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/css; charset=utf-8")
    );
    assert!(header(&headers, "etag").is_some());
    assert!(css.contains("--accent: #0b7a53;"), "{css}");
    assert!(css.contains("--accent-text: #ffffff;"), "{css}");
    assert!(css.contains("prefers-color-scheme: dark"), "{css}");

    let plain = World::start("", "").await;
    let (status, _, css) = plain
        .herald
        .call_raw("GET", "/assets/theme.css", None, &[], Vec::new())
        .await;
    let css = String::from_utf8(css).expect("CSS is text");
    assert_eq!(status, 200);
    assert!(css.contains("--accent: #2f5bd3;"), "{css}");
    assert!(css.contains("herald's own colours"), "{css}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logo_is_served_as_an_image_and_an_svg_runs_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let w = branded(
        "brand = \"Acme\"\n",
        Some(("logo.svg", SVG_LOGO.as_bytes())),
        dir.path(),
    )
    .await;
    let (status, headers, body) = w
        .herald
        .call_raw("GET", "/assets/logo", None, &[], Vec::new())
        .await;
    assert_eq!(status, 200);
    assert_eq!(body, SVG_LOGO.as_bytes());
    assert_eq!(header(&headers, "content-type"), Some("image/svg+xml"));
    let csp = header(&headers, "content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(!csp.contains("script-src"), "{csp}");
    assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"));

    let png = branded("", Some(("logo.png", PNG_LOGO)), dir.path()).await;
    let (status, headers, body) = png
        .herald
        .call_raw("GET", "/assets/logo", None, &[], Vec::new())
        .await;
    assert_eq!(status, 200);
    assert_eq!(body, PNG_LOGO);
    assert_eq!(header(&headers, "content-type"), Some("image/png"));

    let plain = World::start("", "").await;
    let (status, _) = plain.herald.call("GET", "/assets/logo", None, None).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_names_the_brand_and_whether_there_is_a_logo() {
    let dir = tempfile::tempdir().expect("temp dir");
    let w = branded(
        "brand = \"Acme <Cloud> & Co\"\n",
        Some(("logo.svg", SVG_LOGO.as_bytes())),
        dir.path(),
    )
    .await;
    let (_, minted) = w
        .herald
        .admin("POST", "/v1/accounts/acme/portal-sessions", None)
        .await;
    let portal = minted["token"].as_str().expect("portal token");
    for token in [ADMIN_TOKEN, portal] {
        let (status, s) = w.herald.call("GET", "/v1/session", Some(token), None).await;
        assert_eq!(status, 200, "{s}");
        // As the config wrote it: the pages set it as text, so nothing needs escaping here.
        assert_eq!(s["brand"], "Acme <Cloud> & Co", "{s}");
        assert_eq!(s["logo"], true, "{s}");
    }

    let plain = World::start("", "").await;
    let (_, s) = plain.herald.admin("GET", "/v1/session", None).await;
    assert_eq!((&s["brand"], &s["logo"]), (&"herald".into(), &false.into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_never_framed_while_the_portal_takes_frame_ancestors() {
    let w = World::start(
        "",
        "[portal]\nframe_ancestors = [\"https://app.example.com\"]\n",
    )
    .await;
    let csp = |headers: &[(String, String)]| {
        header(headers, "content-security-policy")
            .unwrap_or_default()
            .to_string()
    };
    let (status, headers, _) = w
        .herald
        .call_raw("GET", "/portal", None, &[], Vec::new())
        .await;
    assert_eq!(status, 200);
    assert!(
        csp(&headers).contains("frame-ancestors https://app.example.com"),
        "{}",
        csp(&headers)
    );
    let (status, headers, _) = w
        .herald
        .call_raw("GET", "/console", None, &[], Vec::new())
        .await;
    assert_eq!(status, 200);
    assert!(
        csp(&headers).ends_with("frame-ancestors 'none'"),
        "{}",
        csp(&headers)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assets_are_gzipped_for_a_browser_that_accepts_it() {
    let w = World::start("", "").await;
    for path in [
        "/portal",
        "/console",
        "/assets/app.js",
        "/assets/app.css",
        "/assets/theme.css",
    ] {
        let (status, plain_headers, plain) =
            w.herald.call_raw("GET", path, None, &[], Vec::new()).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(header(&plain_headers, "content-encoding"), None, "{path}");
        assert_eq!(
            header(&plain_headers, "vary"),
            Some("accept-encoding"),
            "{path}"
        );
        let accept = [("accept-encoding", "br, gzip;q=0.8")];
        let (status, headers, gz) = w
            .herald
            .call_raw("GET", path, None, &accept, Vec::new())
            .await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(header(&headers, "content-encoding"), Some("gzip"), "{path}");
        assert_eq!(header(&headers, "vary"), Some("accept-encoding"), "{path}");
        assert!(
            gz.len() < plain.len(),
            "{path}: {} >= {}",
            gz.len(),
            plain.len()
        );
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_end(&mut unzipped)
            .expect("a gzip stream");
        assert_eq!(unzipped, plain, "{path}");
        // Each representation has its own tag, and each revalidates to 304.
        let tag = header(&headers, "etag").expect("etag").to_string();
        assert_ne!(Some(tag.as_str()), header(&plain_headers, "etag"), "{path}");
        let (status, _, _) = w
            .herald
            .call_raw(
                "GET",
                path,
                None,
                &[accept[0], ("if-none-match", &tag)],
                Vec::new(),
            )
            .await;
        assert_eq!(status, 304, "{path}");
        // gzip refused (q=0): sent as it is.
        let (_, headers, _) = w
            .herald
            .call_raw(
                "GET",
                path,
                None,
                &[("accept-encoding", "gzip;q=0, identity")],
                Vec::new(),
            )
            .await;
        assert_eq!(header(&headers, "content-encoding"), None, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_answers_like_get_without_a_body() {
    let w = World::start("", "").await;
    for (path, token) in [
        ("/portal", None),
        ("/console", None),
        ("/assets/app.js", None),
        ("/assets/theme.css", None),
        ("/assets/icon.svg", None),
        ("/healthz", None),
        ("/openapi.json", None),
        ("/v1/status", Some(ADMIN_TOKEN)),
        ("/v1/accounts", Some(ADMIN_TOKEN)),
    ] {
        let (get_status, get_headers, get_body) =
            w.herald.call_raw("GET", path, token, &[], Vec::new()).await;
        let (status, headers, body) = w
            .herald
            .call_raw("HEAD", path, token, &[], Vec::new())
            .await;
        assert_eq!((status, get_status), (200, 200), "HEAD {path}");
        assert!(body.is_empty(), "HEAD {path} sent a body");
        assert_eq!(
            header(&headers, "content-type"),
            header(&get_headers, "content-type"),
            "HEAD {path}"
        );
        if !path.starts_with("/v1/") && path != "/healthz" && path != "/openapi.json" {
            assert_eq!(
                header(&headers, "etag"),
                header(&get_headers, "etag"),
                "{path}"
            );
            assert_eq!(
                header(&headers, "content-length"),
                Some(get_body.len().to_string().as_str()),
                "HEAD {path}"
            );
        }
    }
    // HEAD reaches what GET reaches, no more.
    let (status, _, _) = w
        .herald
        .call_raw("HEAD", "/v1/status", None, &[], Vec::new())
        .await;
    assert_eq!(status, 401);
    // A route without GET: 405 naming what it takes.
    let (status, headers, _) = w
        .herald
        .call_raw("HEAD", "/v1/events", None, &[], Vec::new())
        .await;
    assert_eq!(status, 405);
    assert_eq!(header(&headers, "allow"), Some("POST"));
    let (status, headers, _) = w
        .herald
        .call_raw("PUT", "/console", None, &[], Vec::new())
        .await;
    assert_eq!(status, 405);
    assert_eq!(header(&headers, "allow"), Some("GET, HEAD"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_link_the_theme_and_an_icon_that_is_served() {
    let w = World::start("", "").await;
    for page in ["/portal", "/console"] {
        let (_, _, html) = w.herald.call_raw("GET", page, None, &[], Vec::new()).await;
        let html = String::from_utf8(html).expect("HTML is text");
        assert!(
            html.contains("<link rel=\"stylesheet\" href=\"/assets/theme.css\">"),
            "{page}"
        );
        assert!(
            html.contains("<link rel=\"icon\" href=\"/assets/icon.svg\""),
            "{page}"
        );
    }
    let (status, headers, _) = w
        .herald
        .call_raw("GET", "/assets/icon.svg", None, &[], Vec::new())
        .await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), Some("image/svg+xml"));
}

/// The branded portal in Debian's Chromium (`tests/browser/test_look.py`): brand, logo and
/// accent shown, framed by a host app on another origin with only its nav, a second link
/// replacing the session in a tab and in a frame, the console refusing to be framed, the icon,
/// gzip and `HEAD`. Its own herald: the look needs its own `[portal]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branded_portal_in_a_real_browser() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    crate::pages::require_browser_stack(&root);
    let dir = tempfile::tempdir().expect("temp dir");
    // As installs run: endpoints must be verified before they receive anything.
    let w = branded_with(
        "brand = \"Acme\"\naccent = \"#0b7a53\"\nframe_ancestors = [\"http://localhost:*\"]\n",
        Some(("logo.svg", ACME_LOGO.as_bytes())),
        dir.path(),
        "[endpoints]\nrequire_verification = true\n",
    )
    .await;
    let rx = common::Receiver::ok_https(&w.ca);
    let mut unverified = String::new();
    for account in ["acme", "globex"] {
        let (id, _) = w
            .endpoint(
                account,
                &rx.url(&format!("/hooks/{account}")),
                serde_json::json!({}),
            )
            .await;
        if account == "acme" {
            unverified = id;
        }
    }
    let envs = [
        ("UNVERIFIED_ENDPOINT", unverified),
        ("BRAND", "Acme".to_string()),
        ("ACCENT", "#0b7a53".to_string()),
        ("ACCOUNT", "acme".to_string()),
        ("OTHER_ACCOUNT", "globex".to_string()),
    ];
    crate::pages::run_browser_script(&root, "tests/browser/test_look.py", &envs, &w.herald).await;
}

/// A logo as an operator would draw one: a green mark and a word.
const ACME_LOGO: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 96 32\" \
    width=\"96\" height=\"32\"><rect x=\"2\" y=\"4\" width=\"24\" height=\"24\" rx=\"6\" \
    fill=\"#0b7a53\"/><path d=\"M8 22 14 10 20 22\" fill=\"none\" stroke=\"#fff\" \
    stroke-width=\"3\"/><text x=\"32\" y=\"23\" font-family=\"sans-serif\" font-size=\"18\" \
    font-weight=\"700\" fill=\"#0b7a53\">acme</text></svg>\n";
