#!/usr/bin/env python3
"""The portal's own look and how the pages are served, in a real browser (Debian's Chromium
through Playwright). Run by tests/api/look.rs, which starts herald with

  [portal] brand = BRAND, accent = ACCENT, logo_file = an SVG, frame_ancestors = ["http://localhost:*"]

and two accounts with one endpoint each. Inputs (environment variables): HERALD_URL (an
http://127.0.0.1:PORT address: the host app below runs on http://localhost, another origin),
HERALD_ADMIN_TOKEN, SCREENSHOT_DIR, BRAND, ACCENT (#rrggbb), ACCOUNT and OTHER_ACCOUNT, and
CHROMIUM.

Each scenario is a function named after the behaviour it checks; the script stops at the first
failed check, saying what was expected, and exits 1; it exits 0 when all pass.
"""

import gzip
import http.server
import json
import os
import re
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    sys.exit("playwright is not installed: python3 -m pip install -r tests/browser/requirements.txt")

sys.path.insert(0, str(Path(__file__).parent))
from axe_check import axe_violations  # noqa: E402
from harness import CHROMIUM_ARGS, TIMEOUT_MS, CheckFailed, check, env  # noqa: E402

# The browser's console errors (a CSP refusal is reported there).
CONSOLE_ERRORS = []


URL = env("HERALD_URL").rstrip("/")
ADMIN = env("HERALD_ADMIN_TOKEN")
SHOTS = Path(env("SCREENSHOT_DIR"))
BRAND = env("BRAND")
ACCENT = env("ACCENT")
ACCOUNT = env("ACCOUNT")
OTHER_ACCOUNT = env("OTHER_ACCOUNT")
UNVERIFIED_ENDPOINT = env("UNVERIFIED_ENDPOINT")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ACCENT_RGB = "rgb({}, {}, {})".format(*(int(ACCENT[i:i + 2], 16) for i in (1, 3, 5)))


def request(method, path, token=ADMIN, body=None, headers=None):
    """A direct call: (status, headers, raw body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def portal_link(account):
    status, _, body = request("POST", f"/v1/accounts/{account}/portal-sessions")
    check(status == 201, f"minting a portal link answers {status}: {body!r}")
    answer = json.loads(body)
    # herald builds the link from its public_url (port 0 in tests): the same fragment where
    # herald really is.
    return URL + "/portal#" + answer["url"].split("#", 1)[1], answer["id"]


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


class HostApp:
    """The platform's own app on another origin (http://localhost:PORT): a page that frames
    herald's portal (or console) at the URL in its query string."""

    PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Acme app</title>
<style>body{margin:0;font:15px system-ui,sans-serif;background:#f3f4f6}
header{background:#111827;color:#fff;padding:14px 20px;font-weight:700}
main{padding:16px 20px}iframe{width:100%;height:640px;border:1px solid #d1d5db;border-radius:8px;background:#fff}</style>
</head><body><header>Acme app · Settings · Webhooks</header><main><iframe title="Webhooks"></iframe></main>
<script>const f=document.querySelector("iframe");f.addEventListener("load",()=>{document.body.dataset.loads=String(Number(document.body.dataset.loads||0)+1)});
f.src=decodeURIComponent(location.hash.slice(1));</script></body></html>"""

    def __init__(self):
        page = self.PAGE.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("localhost", 0), Handler)
        self.url = f"http://localhost:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def framing(self, target):
        return self.url + "#" + urllib.request.quote(target, safe="")

    def close(self):
        self.server.shutdown()


# ----------------------------------------------------------------------------------------------
# Scenarios.


def branded_portal_shows_brand_logo_and_accent(ctx):
    page = ctx.new_page()
    missing = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    encodings = {}
    page.on("response", lambda r: encodings.__setitem__(r.url.split("/")[-1], r.headers.get("content-encoding")))
    link, _ = portal_link(ACCOUNT)
    page.goto(link)
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    header = page.locator("header")
    expect(header.locator(".brand")).to_contain_text(BRAND)
    check(page.title() == f"Endpoints — {BRAND} webhooks", f"the title names the brand: {page.title()!r}")
    logo = header.get_by_role("img", name=f"{BRAND} logo")
    expect(logo).to_be_visible()
    check(page.evaluate("(img) => img.complete && img.naturalWidth > 0", logo.element_handle()),
          "the logo image loads")
    # theme.css is applied: the current nav item is underlined in the accent.
    current = page.locator(".nav a[aria-current='page']")
    colour = current.evaluate("(a) => getComputedStyle(a).borderBottomColor")
    check(colour == ACCENT_RGB, f"the current nav item's underline is the accent {ACCENT_RGB}, got {colour}")
    # The tab's icon is the logo once the session is read; no request of the page was a 404.
    icon = page.evaluate("document.querySelector('link[rel=icon]').href")
    check(icon.endswith("/assets/logo"), f"the portal's icon is its logo: {icon}")
    check(not missing, f"requests answered 404: {missing}")
    # The browser takes gzip, so herald sent the scripts and stylesheets gzipped.
    for name in ["app.js", "shell.js", "app.css", "theme.css"]:
        check(encodings.get(name) == "gzip", f"{name} was not sent gzipped: {encodings.get(name)!r}")
    found = axe_violations(page)
    check(not found, f"axe-core finds violations on the branded portal: {json.dumps(found)}")
    shot(page, "portal-branded")
    page.emulate_media(color_scheme="dark")
    colour = current.evaluate("(a) => getComputedStyle(a).borderBottomColor")
    check(colour != ACCENT_RGB, f"the dark scheme uses a lighter shade of the accent, got {colour}")
    shot(page, "portal-branded-dark")
    page.close()


# herald named as a word of the pages: protocol names (the herald-signature header, the
# herald/VERSION User-Agent) are exempt, and so are code, payloads and inputs.
HERALD_WORD = re.compile(r"\bherald\b(?![-/])", re.IGNORECASE)


def a_branded_portal_never_names_herald(ctx):
    page = ctx.new_page()
    link, _ = portal_link(ACCOUNT)
    page.goto(link)
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    base = page.url.split("#")[0]
    ep = UNVERIFIED_ENDPOINT
    views = ["/endpoints", "/endpoints/new", f"/endpoints/{ep}/edit", "/deliveries", "/incidents",
             "/event-types", "/alerts"]
    views += [f"/endpoints/{ep}?tab={t}" for t in ["overview", "deliveries", "settings", "advanced"]]
    for view in views:
        page.goto(f"{base}#{view}")
        expect(page.locator("main .loading")).to_have_count(0, timeout=TIMEOUT_MS)
        expect(page.locator("main h1")).not_to_have_text("")
        text = page.evaluate("""() => {
            const b = document.body.cloneNode(true);
            for (const x of b.querySelectorAll('pre, code, input, textarea, select, script')) x.remove();
            return document.title + '\\n' + b.innerText;
        }""")
        found = [line.strip() for line in text.splitlines() if HERALD_WORD.search(line)]
        check(not found, f"the branded portal names herald on {view}: {found}")
    page.close()


def an_unverified_endpoint_says_it_receives_nothing(ctx):
    # This herald requires verification (as installs do by default): an endpoint that has not
    # passed it gets nothing, and its page says so before anything else.
    page = ctx.new_page()
    link, _ = portal_link(ACCOUNT)
    page.goto(link)
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    page.goto(page.url.split("#")[0] + f"#/endpoints/{UNVERIFIED_ENDPOINT}")
    banner = page.locator("main .banner")
    expect(banner).to_contain_text("This endpoint receives nothing yet: it is not verified.")
    expect(banner).to_contain_text("Press Verify")
    check(banner.get_attribute("role") == "alert", "the banner is announced")
    shot(page, "portal-unverified-banner")
    page.close()


def a_second_link_in_the_same_tab_replaces_the_session(ctx):
    page = ctx.new_page()
    first, first_id = portal_link(ACCOUNT)
    page.goto(first)
    expect(page.locator("header")).to_contain_text(ACCOUNT)
    expect(page.get_by_role("table")).to_contain_text(f"/{ACCOUNT}")
    # The first session is revoked (as an expired one would be), then the host opens a new link
    # for another account in the same tab: only the address's fragment changes.
    status, _, _ = request("DELETE", f"/v1/portal-sessions/{first_id}")
    check(status == 204, f"revoking the first session answers {status}")
    second, _ = portal_link(OTHER_ACCOUNT)
    page.goto(second)
    expect(page.locator("header")).to_contain_text(OTHER_ACCOUNT)
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    expect(page.get_by_role("table")).to_contain_text(f"/{OTHER_ACCOUNT}")
    check(ACCOUNT not in page.locator("main").inner_text(), "the old session's account is still shown")
    check("hps_" not in page.url, f"the token must leave the address bar: {page.url}")
    page.close()


def framed_portal_shows_only_its_nav_and_takes_a_new_link(ctx, host):
    page = ctx.new_page()
    link, _ = portal_link(ACCOUNT)
    page.goto(host.framing(link))
    frame = page.frame_locator("iframe")
    # Under the host's own heading, the section's heading (the current nav item again) is for
    # screen readers only.
    heading = frame.get_by_role("heading", name="Endpoints", exact=True)
    expect(heading).to_be_attached()
    expect(heading).to_have_class("sr-only")
    expect(frame.get_by_role("navigation", name="Main")).to_be_visible()
    expect(frame.locator(".bar")).to_have_count(0)
    expect(frame.locator("header .brand")).to_have_count(0)
    expect(frame.get_by_role("table")).to_contain_text(f"/{ACCOUNT}")
    shot(page, "portal-branded-framed")
    # The host refreshes its embedded link (another account's here): the frame switches at once.
    second, _ = portal_link(OTHER_ACCOUNT)
    page.evaluate("(u) => { document.querySelector('iframe').src = u; }", second)
    expect(frame.get_by_role("table")).to_contain_text(f"/{OTHER_ACCOUNT}")
    expect(frame.locator("main")).not_to_contain_text(f"/{ACCOUNT}")
    expect(frame.get_by_role("heading", name="Endpoints", exact=True)).to_be_attached()
    page.close()


def console_refuses_to_be_framed(ctx, host):
    status, headers, _ = request("GET", "/console", token=None)
    csp = headers.get("content-security-policy") or ""
    check(status == 200 and csp.endswith("frame-ancestors 'none'"),
          f"the console's CSP must forbid framing whatever portal.frame_ancestors says: {csp!r}")
    page = ctx.new_page()
    page.goto(host.framing(URL + "/console"))
    expect(page.locator("body[data-loads]")).to_have_count(1)
    for f in page.frames:
        if f is page.main_frame:
            continue
        try:
            app = f.evaluate("document.body && document.body.dataset.app")
        except PlaywrightError:
            app = None  # the blocked frame's error page is not scriptable
        check(app != "console", f"the console rendered inside another site's frame ({f.url})")
    refused = [m for m in CONSOLE_ERRORS if "frame-ancestors 'none'" in m]
    check(refused, f"the browser did not report refusing to frame the console: {CONSOLE_ERRORS}")
    page.close()


def favicon_gzip_and_head_are_served():
    status, headers, _ = request("GET", "/assets/icon.svg", token=None)
    check(status == 200 and headers.get("content-type") == "image/svg+xml", f"the icon answers {status}")
    status, headers, body = request("GET", "/assets/app.js", token=None, headers={"Accept-Encoding": "gzip"})
    check(headers.get("content-encoding") == "gzip", "app.js is gzipped for a client that takes gzip")
    plain_status, plain_headers, plain = request("GET", "/assets/app.js", token=None)
    check(gzip.decompress(body) == plain, "the gzipped app.js is app.js")
    for path in ["/portal", "/console", "/assets/app.css", "/assets/theme.css", "/assets/logo"]:
        status, headers, body = request("HEAD", path, token=None)
        check(status == 200 and body == b"", f"HEAD {path} answers {status} with {len(body)} bytes")
        check(headers.get("etag"), f"HEAD {path} has no ETag")


# ----------------------------------------------------------------------------------------------


def main():
    results = []
    started = time.time()
    SHOTS.mkdir(parents=True, exist_ok=True)
    host = HostApp()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        problems = []
        ctx = browser.new_context(viewport={"width": 1100, "height": 820})
        ctx.set_default_timeout(TIMEOUT_MS)

        def watch(page):
            page.on("pageerror", lambda e: problems.append(f"script error on {page.url}: {e}"))
            page.on("console", lambda m: CONSOLE_ERRORS.append(m.text) if m.type == "error" else None)
            page.on("dialog", lambda d: (problems.append(f"dialog on {page.url}: {d.message}"), d.dismiss()))

        ctx.on("page", watch)

        def run(name, fn, *args):
            t = time.time()
            try:
                fn(*args)
            except (CheckFailed, AssertionError, PlaywrightError, PlaywrightTimeout) as e:
                print(f"FAIL {name} ({time.time() - t:.1f}s): {e}", flush=True)
                if not isinstance(e, CheckFailed):
                    traceback.print_exc()
                for p in ctx.pages:
                    try:
                        shot(p, f"FAILED-{name}")
                        print(f"  page {p.url}: {p.locator('body').inner_text()[:800]!r}")
                    except PlaywrightError:
                        pass
                if problems or CONSOLE_ERRORS:
                    print(f"  script errors and dialogs: {problems}; console errors: {CONSOLE_ERRORS}")
                print(f"{len(results)} passed, 1 failed", flush=True)
                sys.exit(1)
            results.append(name)
            print(f"ok   {name} ({time.time() - t:.1f}s)", flush=True)

        run("favicon_gzip_and_head_are_served", favicon_gzip_and_head_are_served)
        run("branded_portal_shows_brand_logo_and_accent", branded_portal_shows_brand_logo_and_accent, ctx)
        run("an_unverified_endpoint_says_it_receives_nothing", an_unverified_endpoint_says_it_receives_nothing, ctx)
        run("a_branded_portal_never_names_herald", a_branded_portal_never_names_herald, ctx)
        run("a_second_link_in_the_same_tab_replaces_the_session", a_second_link_in_the_same_tab_replaces_the_session, ctx)
        run("framed_portal_shows_only_its_nav_and_takes_a_new_link", framed_portal_shows_only_its_nav_and_takes_a_new_link, ctx, host)
        run("console_refuses_to_be_framed", console_refuses_to_be_framed, ctx, host)
        run("no_script_error_or_dialog", lambda: check(not problems, f"{problems}"))
        ctx.close()
        browser.close()
    host.close()
    print(f"{len(results)} passed, 0 failed in {time.time() - started:.1f}s; screenshots in {SHOTS}", flush=True)


if __name__ == "__main__":
    main()
