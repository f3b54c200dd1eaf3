#!/usr/bin/env python3
"""herald's portal and console, driven in a real browser (Debian's Chromium through Playwright).

Run by tests/api/pages.rs, which starts herald with a receiver and prepares the fixtures; it can also
be run by hand against any herald prepared the same way. Inputs (environment variables):

  HERALD_URL          herald's base URL, e.g. http://127.0.0.1:8080
  HERALD_ADMIN_TOKEN  an admin token
  SCREENSHOT_DIR      where the full-page screenshots go
  ACCOUNT             the customer's account (has a working and a failing endpoint)
  OTHER_ACCOUNT       another account
  OTHER_DELIVERY      a delivery of OTHER_ACCOUNT (the customer must not see it)
  OTHER_ENDPOINT      an endpoint of OTHER_ACCOUNT
  PURGE_ACCOUNT       an account with one endpoint and one event, for the console to purge
  FAILED_DELIVERY     a failed delivery of ACCOUNT whose payload and response body hold HTML
  FAILING_ENDPOINT    the endpoint of FAILED_DELIVERY (answers 500, retry policy "none")
  RECEIVER_URL        a URL that answers 200, for the endpoint the customer creates
  CHROMIUM            the browser (default /usr/bin/chromium)

Each scenario is a function named after the behaviour it checks. The script stops at the first
failed check with a message saying what was expected, and exits 1; it exits 0 when all pass.
"""

import json
import os
import re
import sys
import time
import traceback
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
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

XSS_IMG = "<img src=x onerror=alert(1)>"
XSS_SCRIPT = "</script><script>alert(2)</script>"
# The buttons (and button-looking links) that change something: a read-only portal session
# sees none of them (docs/api.md, "Who may call what").
CHANGING = ["Retry", "Replay", "Recover", "Send test event", "Pause", "Resume", "Verify",
            "Rotate secret", "Create endpoint", "Save", "Delete", "Edit"]


URL = env("HERALD_URL").rstrip("/")
ADMIN = env("HERALD_ADMIN_TOKEN")
SHOTS = Path(env("SCREENSHOT_DIR"))
ACCOUNT = env("ACCOUNT")
OTHER_ACCOUNT = env("OTHER_ACCOUNT")
OTHER_DELIVERY = env("OTHER_DELIVERY")
OTHER_ENDPOINT = env("OTHER_ENDPOINT")
PURGE_ACCOUNT = env("PURGE_ACCOUNT")
FAILED_DELIVERY = env("FAILED_DELIVERY")
FAILING_ENDPOINT = env("FAILING_ENDPOINT")
HELD_ENDPOINT = env("HELD_ENDPOINT")
GONE_ENDPOINT = env("GONE_ENDPOINT")
HELD_DELIVERY = env("HELD_DELIVERY")
RECEIVER_URL = env("RECEIVER_URL")
CHROMIUM = env("CHROMIUM", "/usr/bin/chromium")


def api(method, path, token=ADMIN, body=None):
    """A direct API call: (status, parsed JSON or None, headers)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            text = r.read()
            return r.status, (json.loads(text) if text else None), r.headers
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        return e.code, parsed, e.headers


class Browser:
    """One Chromium; every page opened through it is watched for dialogs, script errors and CSP
    violations (none may happen)."""

    def __init__(self, pw):
        self.browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        self.dialogs = []
        self.problems = []

    def context(self, **kw):
        ctx = self.browser.new_context(**kw)
        ctx.set_default_timeout(TIMEOUT_MS)
        ctx.on("page", self._watch)
        return ctx

    def page(self, ctx):
        p = ctx.new_page()
        return p

    def _watch(self, page):
        def on_dialog(d):
            self.dialogs.append(f"{d.type}: {d.message} on {page.url}")
            d.dismiss()

        def on_console(m):
            if "Content Security Policy" in m.text or "Refused to" in m.text:
                self.problems.append(f"CSP violation on {page.url}: {m.text}")

        page.on("dialog", on_dialog)
        page.on("console", on_console)
        page.on("pageerror", lambda e: self.problems.append(f"script error on {page.url}: {e}"))

    def assert_clean(self, where):
        check(not self.dialogs, f"{where}: a dialog opened (injected script ran?): {self.dialogs}")
        check(not self.problems, f"{where}: {self.problems}")

    def close(self):
        self.browser.close()


def shot(page, name, full=True):
    """A screenshot in SCREENSHOT_DIR; `full=False` keeps to the window (the docs' pictures,
    docs/img/, are copied from those)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)


def settle(page):
    """Waits until the view has loaded (no loading indicator left), and checks its words: one
    of a thing is never in the plural ("1 attempts")."""
    expect(page.locator("main .loading")).to_have_count(0, timeout=TIMEOUT_MS)
    no_false_plurals(page)


# "1 attempts", "1 failures": a count of one before a plural noun (three letters at least:
# "1 ms" is a unit). Payloads, code and addresses (pre, code, inputs) are the customer's own
# text, not the pages' words.
FALSE_PLURAL = re.compile(r"(?<![\d.,])\b1 (?:[a-z]{2,}s)\b")


def no_false_plurals(page):
    text = page.evaluate("""() => {
        const m = document.querySelector('main').cloneNode(true);
        for (const x of m.querySelectorAll('pre, code, input, textarea, select, .mono')) x.remove();
        return m.innerText;
    }""")
    found = sorted(set(FALSE_PLURAL.findall(text)))
    check(not found, f"a count of one reads in the plural: {found} on {page.url}")


def goto(page, hash_path):
    base = page.url.split("#")[0]
    page.goto(f"{base}#{hash_path}")
    settle(page)


def tab(page, name):
    """Opens a tab of a tabbed page (the endpoint's)."""
    t = page.get_by_role("tab", name=name, exact=True)
    t.click()
    expect(t).to_have_attribute("aria-selected", "true")


def button(page, name):
    return page.get_by_role("button", name=name, exact=True)


def attempts(page):
    return page.locator("tr.attempt")


def check_axe(page, where):
    found = axe_violations(page)
    check(not found, f"axe-core finds violations on {where}: {json.dumps(found)}")


# ----------------------------------------------------------------------------------------------
# Scenarios.


def operator_signs_in_sees_overview_and_mints_portal_link(b):
    ctx = b.context(viewport={"width": 1280, "height": 900})
    page = b.page(ctx)
    page.goto(f"{URL}/console")
    token = page.get_by_label("Admin token")
    expect(token).to_be_visible()
    check(token.get_attribute("type") == "password", "the admin token field must be a password field")
    token.fill("not-the-token-at-all")
    button(page, "Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("401")
    token.fill(ADMIN)
    button(page, "Sign in").click()
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    settle(page)
    check(page.evaluate("sessionStorage.getItem('herald.console.token')") == ADMIN,
          "the console keeps the admin token in sessionStorage")
    for label in ["Pending", "In flight", "Oldest pending", "Dead letters", "Storage", "herald"]:
        expect(page.locator(".stat-label", has_text=label).first).to_be_visible()
    chart = page.locator("svg.chart")
    expect(chart).to_have_count(1)
    check(page.locator("svg.chart rect").count() > 0, "the overview chart draws the last hour's attempts as bars")
    expect(page.locator(".legend")).to_contain_text("http_error")
    expect(page.get_by_role("heading", name="Open circuit breakers")).to_be_visible()
    # A reload keeps the session (sessionStorage) and the view (its URL).
    page.reload()
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    settle(page)
    shot(page, "console-overview")
    page.emulate_media(color_scheme="dark")
    shot(page, "console-overview-dark")
    page.emulate_media(color_scheme="light")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Accounts").click()
    expect(page.get_by_role("heading", name="Accounts", exact=True)).to_be_visible()
    settle(page)
    row = page.locator("tr", has=page.get_by_role("link", name=ACCOUNT, exact=True))
    expect(row).to_have_count(1)
    expect(row).to_contain_text("growth")
    row.get_by_role("button", name="Mint portal link").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Mint link").click()
    link = page.locator(".portal-url")
    expect(link).to_contain_text("/portal#token=hps_")
    expect(page.get_by_role("button", name="Copy link")).to_be_visible()
    shot(page, "console-accounts")

    text = link.inner_text().strip()
    check(text.startswith("http") and "/portal#token=hps_" in text, f"a portal link ends in /portal#token=hps_...: {text!r}")

    # Everything of the portal for any account: the console opens another account's endpoints
    # and a delivery.
    goto(page, f"/endpoints?account_id={OTHER_ACCOUNT}")
    expect(page.get_by_role("table")).to_contain_text("/ok/")
    goto(page, f"/deliveries/{FAILED_DELIVERY}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Delivery of")
    shot(page, "console-delivery")
    ctx.close()
    # herald builds the link from server.public_url; the test's herald listens on a port the OS
    # picked (its public_url says port 0), so open the same fragment where herald really is.
    return URL + "/portal#" + text.split("#", 1)[1]


def customer_opens_link_and_sees_only_their_account(b, link):
    ctx = b.context(viewport={"width": 1280, "height": 900})
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=URL)
    page = b.page(ctx)
    page.goto(link)
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    settle(page)
    check("hps_" not in page.url, f"the token must leave the address bar: {page.url}")
    check(page.evaluate("sessionStorage.getItem('herald.portal.token')").startswith("hps_"),
          "the portal keeps its token in sessionStorage")
    expect(page.locator("header")).to_contain_text(ACCOUNT)
    table = page.get_by_role("table")
    expect(table.locator(f"a[href='#/endpoints/{FAILING_ENDPOINT}']")).to_have_count(1)
    check(table.locator("tbody tr").count() >= 2, "the account's two endpoints are listed")
    for h in ["URL", "State", "Verified", "Event types", "Success (1 h)", "Last success", "Breaker", "Pending"]:
        expect(table.get_by_role("columnheader", name=h, exact=True)).to_be_visible()
    body = page.locator("body").inner_text()
    check(OTHER_ENDPOINT not in body and OTHER_ACCOUNT not in body, "the portal shows another account's data")
    shot(page, "portal-endpoints")

    # Reload: the session survives (sessionStorage), the view keeps its URL.
    page.reload()
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()

    # Another account's delivery, typed in the address: not found.
    goto(page, f"/deliveries/{OTHER_DELIVERY}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("not found")
    expect(page.get_by_role("alert")).to_contain_text("Not found")
    shot(page, "portal-other-account-not-found")
    goto(page, f"/endpoints/{OTHER_ENDPOINT}")
    expect(page.get_by_role("alert")).to_contain_text("not found")
    goto(page, "/deliveries")
    log = page.locator("main").inner_text()
    check(OTHER_DELIVERY not in log, "the portal's log lists another account's delivery")
    return ctx, page


def customer_creates_endpoint_sends_test_event_and_finds_it_in_log(page):
    goto(page, "/endpoints")
    page.get_by_role("link", name="Create endpoint").first.click()
    expect(page.get_by_role("heading", name="Create endpoint", exact=True)).to_be_visible()
    settle(page)
    # A bad URL: the error is shown at the field, tied to it, focused, in the customer's words
    # (no status code, no parser wording, no operator config key).
    url = page.get_by_label("URL", exact=True)
    for bad, words in [("ftp://nowhere", "must start with https://"), ("nowhere", "Enter the full address"),
                       ("http://example.com/hook", "must start with https://")]:
        url.fill(bad)
        button(page, "Create endpoint").click()
        error = page.locator("#f-url-error")
        expect(error).to_contain_text(words)
        check(url.get_attribute("aria-invalid") == "true", "the field in error is marked")
        check("f-url-error" in (url.get_attribute("aria-describedby") or ""), "the error is tied to its field")
        check(page.evaluate("document.activeElement.id") == "f-url", "the field in error has the focus")
        text = page.locator("main").inner_text()
        for developer_words in ["Error 422", "relative URL", "delivery.allow_http", "allow_http"]:
            check(developer_words not in text, f"the form shows developer words: {developer_words!r}")
        check(error.evaluate("(e) => e.getBoundingClientRect().bottom <= window.innerHeight"),
              "the error is on screen, beside its field")
    expect(page.get_by_role("alert").first).to_contain_text("Check the highlighted field")
    page.get_by_label("URL", exact=True).fill(RECEIVER_URL)
    page.get_by_label("Description").fill("Created in the browser test")
    page.get_by_label("order.created").check()
    button(page, "Add header").click()
    page.get_by_label("Header 1 name").fill("x-team")
    page.get_by_label("Header 1 value").fill("payments")
    retry_policy = page.get_by_label("Retry policy")
    check(retry_policy.evaluate("(e) => e.tagName") == "SELECT", "the retry policy is picked from a list")
    retry_policy.select_option("standard")
    page.get_by_label("Ordering", exact=True).select_option("key")
    page.get_by_label("Ordering key").fill("customer_id")
    page.get_by_label("Rate limit (requests per second)").fill("5")
    page.get_by_label("Pass the trace on (traceparent)").check()
    shot(page, "portal-endpoint-form")
    button(page, "Create endpoint").click()
    secret = page.locator(".secret-value")
    expect(secret).to_contain_text("whsec_")
    secret_text = secret.inner_text().strip()
    expect(page.locator(".secret")).to_contain_text("will not be shown again")
    page.locator(".secret").get_by_role("button", name="Copy").click()
    expect(page.locator(".secret").get_by_role("button", name="Copied")).to_be_visible()
    check(page.evaluate("navigator.clipboard.readText()") == secret_text, "Copy puts the secret on the clipboard")
    shot(page, "portal-endpoint-created")

    page.get_by_role("link", name="Open endpoint").click()
    expect(page.locator(".url-line").first).to_contain_text(RECEIVER_URL)
    settle(page)
    main = page.locator("main")
    # Four tabs; Overview first. The settings are on their own tab, kept in the address.
    expect(page.get_by_role("tab")).to_have_count(4)
    tab_names = [t.strip() for t in page.get_by_role("tab").all_inner_texts()]
    check(tab_names == ["Overview", "Deliveries", "Settings", "Advanced"], f"the endpoint page's tabs: {tab_names}")
    tab(page, "Settings")
    expect(main).to_contain_text("by customer_id")
    expect(main).to_contain_text("5 per second")
    expect(main).to_contain_text("passed on to the receiver (traceparent)")
    check("tab=settings" in page.url, "the open tab lives in the address")
    page.reload()
    settle(page)
    expect(page.get_by_role("tab", name="Settings", exact=True)).to_have_attribute("aria-selected", "true")
    # Arrow keys move between tabs.
    page.get_by_role("tab", name="Settings", exact=True).focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name="Advanced", exact=True)).to_have_attribute("aria-selected", "true")
    check(secret_text not in page.locator("body").inner_text(), "the secret is shown once only")
    # The test event is of a type this endpoint takes (order.created), never a deprecated one,
    # and its sample can be edited: a payload the type's schema refuses is not sent.
    check(page.get_by_label("Event type", exact=True).input_value() == "order.created",
          "the test event defaults to a type the endpoint takes")
    payload = page.get_by_label("Payload", exact=True)
    expect(payload).to_have_value(re.compile("ord_1001"))
    payload.fill('{"order_id": 7}')
    button(page, "Send test event").click()
    result = page.locator("section", has=page.get_by_role("heading", name="Send a test event")).get_by_role("alert")
    expect(result).to_contain_text("Not sent")
    expect(result).to_contain_text("/order_id")
    payload.fill('{"order_id": "ord_edited", "total": 1}')
    button(page, "Send test event").click()
    result = page.locator("section", has=page.get_by_role("heading", name="Send a test event")).get_by_role("status")
    expect(result).to_contain_text("delivered", timeout=20_000)
    expect(page.locator("pre", has_text="standardwebhooks").first).to_be_attached()
    # The Deliveries tab reads again too: the test event's delivery is listed, no reload.
    tab(page, "Deliveries")
    recent = page.locator("section", has=page.get_by_role("heading", name="Recent deliveries"))
    expect(recent.locator("tbody tr")).to_have_count(1)
    expect(recent).not_to_contain_text("Nothing delivered")
    endpoint_id = page.url.split("?")[0].rsplit("/", 1)[1]
    # The page reads its figures again after the test event (no reload), and the chart picks
    # its window: the test event's attempt is in both, counted by the store.
    tab(page, "Overview")
    facts = page.locator("section", has=page.get_by_role("heading", name="Health", exact=True))
    expect(facts).not_to_contain_text("never")
    chart = page.locator("section", has=page.get_by_role("heading", name="Attempts", exact=True)).locator("svg.chart")
    expect(chart).to_have_attribute("aria-label", re.compile(r"1 attempt in the last hour — delivered 1"))
    page.get_by_label("Chart window").select_option("24h")
    expect(chart).to_have_attribute("aria-label", re.compile(r"per 15 minutes .*1 attempt in the last 24 hours — delivered 1"))
    # The week, per 2 hours, from the hours the store keeps; the latency of the requests as
    # percentiles, above the chart and as its two lines.
    page.get_by_label("Chart window").select_option("7d")
    expect(chart).to_have_attribute("aria-label", re.compile(r"per 2 hours .*1 attempt in the last 7 days — delivered 1"))
    section = page.locator("section", has=page.get_by_role("heading", name="Attempts", exact=True))
    expect(section.locator(".latency-line")).to_contain_text(re.compile(r"p50 \d+ ms · p95 \d+ ms · max \d+ ms"))
    expect(section.locator(".legend")).to_contain_text("p95 latency")
    check(chart.locator("path.lat-line").count() == 2, "the chart draws a p50 and a p95 line")
    page.get_by_label("Chart window").select_option("24h")
    expect(chart).to_have_attribute("aria-label", re.compile(r"per 15 minutes"))
    shot(page, "portal-endpoint-page")
    shot(page, "doc-portal-endpoint", full=False)

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Deliveries").click()
    expect(page.get_by_role("heading", name="Deliveries", exact=True)).to_be_visible()
    settle(page)
    for label in ["Endpoint", "Event type", "State", "Status", "Time range"]:
        expect(page.get_by_label(label, exact=True)).to_be_visible()
    # The endpoint filter names endpoints apart: by description, else by their whole URL.
    labels = page.get_by_label("Endpoint", exact=True).locator("option").all_inner_texts()
    check(len(set(labels)) == len(labels), f"every endpoint reads differently: {labels}")
    page.get_by_label("Endpoint", exact=True).select_option(endpoint_id)
    rows = page.locator(".results tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("order.created")
    expect(rows.first).to_contain_text("delivered")
    check(f"endpoint_id={endpoint_id}" in page.url, "the filters live in the URL")
    page.get_by_label("Status", exact=True).select_option("http_error")
    expect(page.locator(".results")).to_contain_text("No deliveries match")
    page.get_by_label("Status", exact=True).select_option("")
    page.get_by_label("Time range", exact=True).select_option("1h")
    expect(rows).to_have_count(1)
    page.reload()
    settle(page)
    expect(page.locator(".results tbody tr")).to_have_count(1)
    shot(page, "portal-deliveries-filtered")

    # Cursor paging: pages of 3 (the log's page is 50; ?limit= changes it), then "Load more".
    goto(page, "/deliveries?limit=3")
    rows = page.locator(".results tbody tr")
    expect(rows).to_have_count(3)
    first_ids = rows.locator("td.id-cell").all_inner_texts()
    button(page, "Load more").click()
    expect(rows).to_have_count(6)
    ids = rows.locator("td.id-cell").all_inner_texts()
    check(ids[:3] == first_ids and len(set(ids)) == 6, f"Load more appends the next page: {ids}")
    check(ids == sorted(ids, reverse=True), f"the log is newest first: {ids}")
    # One search box: a text in the payload, a delivery id; another account's text finds nothing.
    goto(page, "/deliveries")
    search = page.get_by_label("Search", exact=True)
    search.fill("ord_3")
    search.press("Enter")
    rows = page.locator(".results tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator(".results .count")).to_have_text("2 deliveries found")
    check("q=ord_3" in page.url, "the search lives in the URL")
    shot(page, "portal-deliveries-search")
    search.fill(f" {FAILED_DELIVERY} ")
    search.press("Enter")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td.id-cell")).to_have_text(FAILED_DELIVERY)
    search.fill("ord_globex")
    search.press("Enter")
    expect(page.locator(".results")).to_contain_text("Nothing found for “ord_globex”")
    goto(page, "/deliveries")
    expect(page.locator(".results tbody tr").first).to_be_visible()
    shot(page, "portal-deliveries")
    shot(page, "doc-portal-log", full=False)
    # Rows lead with type, status, time and endpoint; the type is picked from the catalog; a
    # click anywhere on a row opens its delivery; Refresh reads the log again.
    headers = [t.lower() for t in page.locator(".results thead th").all_text_contents()]
    check(headers[:4] == ["event type", "status", "time", "endpoint"], f"the log's columns: {headers}")
    page.get_by_label("Event type", exact=True).select_option("invoice.paid")
    rows = page.locator(".results tbody tr")
    expect(rows.first).to_contain_text("invoice.paid")
    check(all("invoice.paid" in t for t in rows.locator("td.type-cell").all_inner_texts()), "only the picked type is listed")
    button(page, "Refresh").click()
    expect(rows.first).to_contain_text("invoice.paid")
    rows.first.locator("td.id-cell").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Delivery of invoice.paid")


def a_delivery_held_by_the_breaker_says_so_and_retry_says_what_happens(page):
    # Its description holds a right-to-left override: the list shows it as an escape.
    goto(page, "/endpoints")
    expect(page.locator("main")).to_contain_text("Held by its breaker invoice\\u{202E}fdp.exe")
    check("\u202e" not in page.locator("main").inner_text(), "a bidirectional override reached the list")
    goto(page, f"/deliveries/{HELD_DELIVERY}")
    where = page.locator("section", has=page.get_by_role("heading", name="Where it stands"))
    expect(where).to_contain_text("Why waiting")
    expect(where).to_contain_text("endpoint failing: held until its next probe")
    # The log says the same in its "Why waiting" column.
    goto(page, f"/deliveries?endpoint_id={HELD_ENDPOINT}")
    expect(page.locator(".results tbody tr").first.locator("td.why-cell")).to_contain_text("held until its next probe")
    goto(page, f"/deliveries/{HELD_DELIVERY}")
    button(page, "Retry").click()
    out = page.get_by_role("status").filter(has_text="Retry queued")
    expect(out).to_contain_text("its deliveries are held until the next probe")
    check("a new attempt is being made now" not in page.locator("main").inner_text(),
          "a retry on a held endpoint does not claim an attempt is made now")
    shot(page, "portal-delivery-held")
    shot(page, "doc-portal-delivery-held", full=False)
    goto(page, f"/endpoints/{HELD_ENDPOINT}")
    expect(page.locator("main")).to_contain_text("next probe")


def customer_sets_a_payload_filter_and_tests_it_against_a_recent_event(page):
    goto(page, "/endpoints")
    page.get_by_role("link", name=RECEIVER_URL, exact=True).click()
    settle(page)
    tab(page, "Settings")
    expect(page.locator("main")).to_contain_text("none: every event of its types")
    page.get_by_role("link", name="Edit", exact=True).click()
    expect(page.get_by_role("heading", name="Edit endpoint", exact=True)).to_be_visible()
    settle(page)
    flt = page.get_by_label("Filter (JSON)")
    # Not JSON: said before anything is sent, and the field is marked.
    flt.fill('{"payload": ')
    button(page, "Save").click()
    expect(page.locator("#f-filter-error")).to_contain_text("not valid JSON")
    check(flt.get_attribute("aria-invalid") == "true", "the filter field in error is marked")
    # A wrong operand: the API's message names the path inside the filter, at the field.
    flt.fill('{"payload": {"total": {"$gte": true}}}')
    button(page, "Save").click()
    expect(page.locator("#f-filter-error")).to_contain_text("filter.payload.total.$gte")
    # Editing the field in error takes its message away: a message belongs to the Save that
    # made it.
    flt.fill('{"payload": {"total": {"$gte": 5000}}}')
    expect(page.locator("#f-filter-error")).to_have_count(0)
    expect(page.get_by_text("Check the highlighted field")).to_have_count(0)
    # Tested against a recent event of the account (the fixture's orders and invoices carry a
    # total). Events of one type are told apart by the end of their id and a preview of their
    # payload; the types this endpoint takes (order.created) come first; the chosen event's
    # payload is shown.
    pick = page.get_by_label("Test against a recent event")
    labels = pick.locator("option").all_inner_texts()
    check(len(set(labels)) == len(labels), f"every event reads differently in the picker: {labels}")
    check(all("order_id=ord_" in t for t in labels if "invoice.paid" in t), f"labels preview the payload: {labels}")
    check(all("order.created" in t for t in pick.locator("optgroup").first.locator("option").all_inner_texts()),
          f"the endpoint's own types come first: {labels}")
    order = pick.locator("option", has_text="order.created").filter(has_text="total=42").first
    expect(order).to_be_attached()
    pick.select_option(order.get_attribute("value"))
    expect(page.locator(".filter-event")).to_contain_text('"total": 42')
    result = page.locator(".filter-result")
    flt.fill('{"payload": {"total": {"$gte": 5000}}}')
    button(page, "Test").click()
    expect(result).to_contain_text("Does not match")
    expect(result).to_contain_text("is not >= 5000")
    flt.fill('{"payload": {"total": {"$gte": 4200}}, "type": {"$startsWith": "order."}}')
    button(page, "Test").click()
    expect(result).to_contain_text("Matches")
    # The test decides as delivery does: an invoice, which this endpoint does not take, is left
    # out by its type, though the filter alone would take its total.
    invoice = pick.locator("option", has_text="invoice.paid").first
    pick.select_option(invoice.get_attribute("value"))
    flt.fill('{"payload": {"total": {"$gte": 4200}}}')
    button(page, "Test").click()
    expect(result).to_contain_text("Does not match")
    expect(result).to_contain_text("type invoice.paid is not one of this endpoint's")
    # With the form's types changed (not saved yet), the test follows the form.
    page.get_by_label("Other patterns").fill("invoice.*")
    button(page, "Test").click()
    expect(result).to_contain_text("Matches")
    page.get_by_label("Other patterns").fill("")
    pick.select_option(order.get_attribute("value"))
    flt.fill('{"payload": {"total": {"$gte": 4200}}, "type": {"$startsWith": "order."}}')
    button(page, "Test").click()
    expect(result).to_contain_text("Matches")
    shot(page, "portal-filter-editor")
    page.get_by_label("Filter (JSON)").scroll_into_view_if_needed()
    shot(page, "doc-portal-filter-editor", full=False)
    button(page, "Save").click()
    expect(page.locator("main")).to_contain_text("Saved.")
    tab(page, "Settings")
    expect(page.locator(".filter-shown")).to_contain_text('"$gte": 4200')
    # Cleared again: the endpoint takes every event of its types.
    page.get_by_role("link", name="Edit", exact=True).click()
    settle(page)
    page.get_by_label("Filter (JSON)").fill("")
    button(page, "Save").click()
    expect(page.locator("main")).to_contain_text("Saved.")
    tab(page, "Settings")
    expect(page.locator("main")).to_contain_text("none: every event of its types")


def a_disabled_endpoint_says_why_and_resumes(page):
    goto(page, f"/endpoints/{GONE_ENDPOINT}")
    banner = page.locator("main .disabled-banner")
    expect(banner).to_contain_text("This endpoint is disabled")
    expect(banner).to_contain_text("410 Gone")
    check(banner.get_attribute("role") == "alert", "the banner is announced")
    shot(page, "portal-endpoint-disabled")
    banner.get_by_role("button", name="Resume").click()
    expect(page.locator(".obj-head")).to_contain_text("active")
    expect(page.locator("main .disabled-banner")).to_have_count(0)
    expect(page.locator("[data-flash]")).to_be_focused()


def customer_pauses_edits_rotates_verifies_replays_and_deletes_endpoint(page):
    goto(page, "/endpoints")
    page.get_by_role("link", name=RECEIVER_URL, exact=True).click()
    expect(page.locator(".obj-head")).to_contain_text("active")
    settle(page)
    button(page, "Pause").click()
    expect(page.locator(".obj-head")).to_contain_text("paused")
    # The page is drawn again; focus goes to the message that answers the press, not <body>.
    expect(page.locator("[data-flash]")).to_contain_text("Paused")
    expect(page.locator("[data-flash]")).to_be_focused()
    button(page, "Resume").click()
    expect(page.locator(".obj-head")).to_contain_text("active")
    expect(button(page, "Pause")).to_be_visible()
    expect(page.locator("[data-flash]")).to_contain_text("Resumed")
    expect(page.locator("[data-flash]")).to_be_focused()

    page.get_by_role("link", name="Edit", exact=True).click()
    expect(page.get_by_role("heading", name="Edit endpoint", exact=True)).to_be_visible()
    settle(page)
    check(page.get_by_label("order.created").is_checked(), "the edit form shows the endpoint's event types")
    page.get_by_label("Description").fill("Edited in the browser test")
    button(page, "Save").click()
    expect(page.locator("main")).to_contain_text("Saved.")
    expect(page.locator(".obj-head")).to_contain_text("Edited in the browser test")

    button(page, "Rotate secret").click()
    page.get_by_role("dialog").get_by_role("button", name="Rotate secret").click()
    expect(page.locator(".secret-value")).to_contain_text("whsec_")
    expect(page.locator(".secret")).to_contain_text("will not be shown again")
    # "Saved." answered the Save, not the rotation: it went when the rotation began.
    expect(page.locator("main")).not_to_contain_text("Saved.")

    # The receiver answers "ok", not the challenge's HMAC: herald says why it is not verified.
    button(page, "Verify").click()
    expect(page.get_by_role("alert")).to_contain_text("Not verified", timeout=20_000)
    expect(page.get_by_role("alert")).to_contain_text("not with the challenge")
    expect(page.get_by_role("alert").locator("details.tech")).to_be_attached()
    shot(page, "portal-endpoint-actions")

    endpoint_page = page.url
    tab(page, "Deliveries")
    page.get_by_role("link", name="All deliveries of this endpoint").click()
    expect(page.locator(".results tbody tr").first).to_be_visible()
    page.locator(".results tbody tr a[href^='#/deliveries/']").first.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Delivery of")
    settle(page)
    button(page, "Replay").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("new event")
    dialog.get_by_role("button", name="Replay").click()
    expect(page.locator("main")).to_contain_text("Replayed as a new event")
    page.get_by_role("link", name="open its delivery").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Delivery of")

    page.goto(endpoint_page)
    settle(page)
    button(page, "Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("cannot be undone")
    dialog.get_by_role("button", name="Delete").click()
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    expect(page.locator("main")).to_contain_text("Endpoint deleted")
    settle(page)
    expect(page.get_by_role("link", name=RECEIVER_URL, exact=True)).to_have_count(0)


def customer_opens_failed_delivery_and_retries(page):
    goto(page, "/deliveries?state=failed")
    page.locator("tr", has_text=FAILED_DELIVERY).get_by_role("link").first.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Delivery of")
    settle(page)
    where = page.locator("section", has=page.get_by_role("heading", name="Where it stands"))
    expect(where).to_contain_text("failed")
    before = attempts(page).count()
    check(before >= 1, "a failed delivery shows its attempts")
    button(page, "Retry").click()
    expect(attempts(page)).to_have_count(before + 1, timeout=25_000)
    expect(page.locator("main")).to_contain_text(f"Attempt {before + 1}: http_error HTTP 500")
    shot(page, "portal-delivery")


def payload_and_response_body_render_as_text(page, b):
    goto(page, f"/deliveries/{FAILED_DELIVERY}")
    payload = page.locator("section", has=page.get_by_role("heading", name="Payload")).locator("pre")
    expect(payload).to_contain_text(XSS_IMG)
    expect(payload).to_contain_text(XSS_SCRIPT)
    # The newest attempt is open: its response excerpt is the receiver's HTML, as text.
    detail = page.locator("tr.detail:not([hidden])").first
    expect(detail).to_contain_text("Response excerpt")
    expect(detail.locator("pre")).to_contain_text(XSS_IMG)
    expect(detail.locator("pre")).to_contain_text(XSS_SCRIPT)
    expect(detail).to_contain_text("webhook-signature")
    expect(detail).to_contain_text("500")
    # The receiver's answer's headers, beside its body.
    answered = detail.get_by_role("table", name="Response headers")
    expect(answered).to_contain_text("content-type")
    expect(answered).to_contain_text("text/html")
    # An older attempt opens on demand.
    toggles = page.locator("button.disclose")
    if toggles.count() > 1:
        toggles.nth(1).click()
        expect(toggles.nth(1)).to_have_attribute("aria-expanded", "true")
    check(page.locator("img").count() == 0, "an <img> element was injected into the page")
    check(page.evaluate("document.scripts.length") == 1, "a <script> element was injected into the page")
    # A right-to-left override in the payload and the response is shown as an escape, never
    # applied: the page holds no U+202E at all.
    expect(payload).to_contain_text("invoice\\u{202E}fdp.exe")
    expect(detail.locator("pre")).to_contain_text("invoice\\u{202E}fdp.exe")
    check("\u202e" not in page.locator("main").inner_text(), "a bidirectional override reached the page")
    check(payload.locator("span.esc").count() >= 1, "the escape is marked")
    page.get_by_role("link", name=page.locator("a[href^='#/events/']").first.inner_text()).first.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Event")
    settle(page)
    expect(page.locator("pre").first).to_contain_text(XSS_IMG)
    check(page.locator("img").count() == 0, "an <img> element was injected into the event page")
    shot(page, "portal-event")
    b.assert_clean("after showing HTML payloads and response bodies")


def endpoint_attempts(endpoint_id):
    """All attempts of an endpoint's deliveries (the fixture's are few)."""
    status, page, _ = api("GET", f"/v1/deliveries?endpoint_id={endpoint_id}&limit=500")
    check(status == 200, f"list deliveries: {status} {page}")
    return sum(d["attempt_count"] for d in page["items"])


def recover_shows_count_before_confirming(page):
    since = (datetime.now(timezone.utc) - timedelta(hours=24)).strftime("%Y-%m-%dT%H:%M:%SZ")
    goto(page, f"/endpoints/{FAILING_ENDPOINT}")
    status, dry, _ = api("POST", f"/v1/endpoints/{FAILING_ENDPOINT}/recover", body={"since": since, "dry_run": True})
    check(status == 200 and dry["deliveries"] >= 1, f"the fixture has failed deliveries to recover: {status} {dry}")
    n = dry["deliveries"]
    attempts_before = endpoint_attempts(FAILING_ENDPOINT)
    tab(page, "Deliveries")
    button(page, "Recover").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading")).to_contain_text(f"Recover {n} deliveries since")
    shot(page, "portal-recover-confirm")
    check(endpoint_attempts(FAILING_ENDPOINT) == attempts_before,
          "nothing may be retried before the count is confirmed")
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.locator("main")).to_contain_text("Nothing was recovered")
    button(page, "Recover").click()
    page.get_by_role("dialog").get_by_role("button", name="Recover").click()
    expect(page.locator("main")).to_contain_text(f"Recovering {n} deliveries")
    deadline = time.time() + 20
    while time.time() < deadline:
        if endpoint_attempts(FAILING_ENDPOINT) > attempts_before:
            break
        time.sleep(0.2)
    else:
        raise CheckFailed("Recover made no new attempt of the endpoint's failed deliveries")


def customer_sets_alert_addresses_with_field_errors(page):
    _, before, _ = api("GET", f"/v1/accounts/{ACCOUNT}")
    nav = page.get_by_role("navigation", name="Main")
    nav.get_by_role("link", name="Alerts", exact=True).click()
    settle(page)
    expect(page.get_by_role("heading", name="Alerts", exact=True)).to_be_visible()
    first, second = page.get_by_label("Address 1", exact=True), page.get_by_label("Address 2", exact=True)
    first.fill("ops@customer.test")
    second.fill("not an address")
    button(page, "Save").click()
    # At the field, in plain words (from the API's reason, not its sentence), the technical
    # line behind Details.
    error = page.locator(".field", has=second).locator(".field-error")
    expect(error).to_contain_text("An address needs an @")
    expect(error.locator("details")).to_contain_text("alert_emails[1]")
    expect(page.locator("main .msg.error")).to_contain_text("Check the highlighted address")
    check(second.get_attribute("aria-invalid") == "true", "the refused address is not marked invalid")
    status, a, _ = api("GET", f"/v1/accounts/{ACCOUNT}")
    check(status == 200 and a["alert_emails"] == [], f"a refused save changed the addresses: {a}")
    second.fill("oncall@customer.test")
    button(page, "Save").click()
    expect(page.locator("main .msg.ok")).to_contain_text("Saved: 2 addresses")
    status, a, _ = api("GET", f"/v1/accounts/{ACCOUNT}")
    check(a["alert_emails"] == ["ops@customer.test", "oncall@customer.test"], f"saved addresses: {a}")
    check(a["plan"] == before["plan"], f"saving addresses changed the plan: {before} -> {a}")
    # A test mail to the saved addresses (the Rust side reads it from its SMTP server).
    test = button(page, "Send test alert")
    test.click()
    expect(page.locator("main .msg.ok").last).to_contain_text("Sent to ops@customer.test, oncall@customer.test")
    check(page.evaluate("document.activeElement && document.activeElement.textContent") == "Send test alert",
          "focus left the Send test alert button")
    shot(page, "portal-alerts")


def read_only_session_shows_no_changing_controls(b):
    status, s, _ = api("POST", f"/v1/accounts/{ACCOUNT}/portal-sessions", body={"read_only": True, "ttl": "10m"})
    check(status == 201 and s["read_only"] is True, f"mint a read-only session: {status} {s}")
    token = s["token"]
    ctx = b.context(viewport={"width": 1280, "height": 900})
    page = b.page(ctx)
    page.goto(f"{URL}/portal#token={token}")
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    settle(page)
    expect(page.locator("header")).to_contain_text("read-only")
    views = ["/endpoints", f"/endpoints/{FAILING_ENDPOINT}", "/deliveries", f"/deliveries/{FAILED_DELIVERY}",
             "/incidents", "/event-types", "/endpoints/new", "/alerts"]
    for v in views:
        goto(page, v)
        for name in CHANGING:
            n = page.get_by_role("button", name=name, exact=True).count() + page.get_by_role("link", name=name, exact=True).count()
            check(n == 0, f"read-only session: {v} shows a {name!r} control")
    goto(page, "/alerts")
    expect(page.locator("main")).to_contain_text("oncall@customer.test")
    check(page.locator("main input").count() == 0, "read-only session: the Alerts view shows inputs")
    goto(page, f"/deliveries/{FAILED_DELIVERY}")
    expect(attempts(page).first).to_be_visible()
    shot(page, "portal-read-only-delivery")
    ctx.close()
    status, answer, _ = api("POST", f"/v1/deliveries/{FAILED_DELIVERY}/retry", token=token)
    check(status == 403 and answer["error"]["code"] == "read_only",
          f"a read-only token's retry must answer 403 read_only, got {status} {answer}")


def pages_carry_csp_and_frame_ancestors():
    for path in ["/portal", "/console", "/assets/app.js", "/assets/shell.js", "/assets/app.css"]:
        req = urllib.request.Request(URL + path)
        with urllib.request.urlopen(req, timeout=10) as r:
            status, headers = r.status, r.headers
        check(status == 200, f"GET {path} answers {status}")
        csp = headers.get("content-security-policy") or ""
        check("default-src 'self'" in csp, f"{path}: CSP default-src 'self' missing: {csp!r}")
        check("unsafe-inline" not in csp and "unsafe-eval" not in csp, f"{path}: CSP allows inline code: {csp!r}")
        check("frame-ancestors 'none'" in csp, f"{path}: frame-ancestors 'none' missing: {csp!r}")
        check(headers.get("x-content-type-options") == "nosniff", f"{path}: nosniff missing")
        check(headers.get("referrer-policy") == "no-referrer", f"{path}: no-referrer missing")
        check(headers.get("etag"), f"{path}: ETag missing")


def the_chart_keeps_every_digit_of_large_counts(b, link):
    # herald's own answer, with the current minute's count raised to 50,000 (a busy endpoint):
    # the left axis labels stay whole inside the chart.
    def big(route):
        answer = route.fetch()
        stats = answer.json()
        now = datetime.now(timezone.utc).replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        stats["minutes"] = [{"at": now, "attempts": {"delivered": 50000}, "latency_ms": {"mean": 80, "max": 300}}]
        route.fulfill(response=answer, json=stats)

    ctx = b.context(viewport={"width": 1280, "height": 900})
    page = b.page(ctx)
    page.route("**/v1/endpoints/*/stats*", big)
    page.goto(link)
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    goto(page, f"/endpoints/{FAILING_ENDPOINT}")
    chart = page.locator("svg.chart")
    expect(chart).to_have_attribute("aria-label", re.compile("50000 attempts"))
    labels = page.evaluate("""() => {
        const svg = document.querySelector('svg.chart');
        const box = svg.getBoundingClientRect();
        return [...svg.querySelectorAll('text.axis')].map((t) => {
            const r = t.getBoundingClientRect();
            return [t.textContent, r.left >= box.left - 0.5 && r.right <= box.right + 0.5];
        });
    }""")
    check("50K" in [t for t, _ in labels], f"the top of the axis reads 50K: {labels}")
    cut = [t for t, inside in labels if not inside]
    check(not cut, f"axis labels cut off by the chart's edge: {cut}")
    ctx.close()


def nothing_overflows_at_1280_and_390_px_with_a_300_character_description(b, link):
    long_desc = "x" * 300
    status, made, _ = api("POST", f"/v1/accounts/{ACCOUNT}/endpoints",
                          body={"url": RECEIVER_URL + "/long", "description": long_desc})
    check(status == 201, f"create the long-described endpoint: {status} {made}")
    long_id = made["endpoint"]["id"]

    def no_table_scrolls(page, where):
        wide = page.evaluate("""[...document.querySelectorAll('main .table-wrap')]
            .filter((w) => w.scrollWidth > w.clientWidth + 1).map((w) => w.getAttribute('aria-label'))""")
        check(not wide, f"{where}: tables wider than their box (columns hidden): {wide}")

    def one_line_nav_and_cards(page, where):
        # Below 600 px: the nav (and an endpoint's tabs) stay one line and scroll sideways;
        # a table's rows are cards whose every cell shows, labelled by its column.
        lines = page.evaluate("""(() => { const m = {};
            for (const a of document.querySelectorAll('.nav a, .tabs [role=tab]')) {
              const k = a.closest('.nav') ? 'nav' : 'tabs';
              (m[k] = m[k] || []).push(Math.round(a.getBoundingClientRect().top)); }
            return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, new Set(v).size])); })()""")
        check(all(n == 1 for n in lines.values()), f"at 390 px, {where}: the nav and tabs wrap: {lines}")
        hidden = page.evaluate("""[...document.querySelectorAll('main .table-wrap tbody td[data-label]')]
            .filter((td) => td.textContent.trim() && (td.offsetWidth === 0 || td.getBoundingClientRect().right > innerWidth + 1))
            .map((td) => td.dataset.label)""")
        check(not hidden, f"at 390 px, {where}: cells hidden or cut: {hidden}")
        if page.locator("main .table-wrap tbody tr").count():
            label = page.evaluate("getComputedStyle(document.querySelector('main .table-wrap tbody td[data-label]'), '::before').content")
            check(label not in ("none", "normal", ""), f"at 390 px, {where}: cells are labelled by their column: {label}")

    def no_page_scroll(page, where, width):
        sw, cw = page.evaluate("[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
        check(sw <= cw, f"at {width} px, {where} scrolls sideways: {sw} > {cw}")

    for width in [1280, 390]:
        ctx = b.context(viewport={"width": width, "height": 900})
        page = b.page(ctx)
        page.goto(link)
        expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
        for view in ["/endpoints", f"/endpoints/{long_id}", "/deliveries", "/incidents"]:
            goto(page, view)
            if view == "/endpoints":
                expect(page.locator("main")).to_contain_text(long_desc[:40])
            no_page_scroll(page, view, width)
            if width == 1280:
                no_table_scrolls(page, f"at 1280 px, {view}")
            else:
                one_line_nav_and_cards(page, view)
        if width == 1280:
            shot(page, "portal-long-description")
        ctx.close()
        ctx = b.context(viewport={"width": width, "height": 900})
        page = b.page(ctx)
        page.goto(f"{URL}/console")
        page.get_by_label("Admin token").fill(ADMIN)
        button(page, "Sign in").click()
        expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        settle(page)
        for view in ["/overview", f"/endpoints?account_id={ACCOUNT}"]:
            goto(page, view)
            no_page_scroll(page, f"the console's {view}", width)
            if width == 1280:
                no_table_scrolls(page, f"at 1280 px, the console's {view}")
        ctx.close()
    status, _, _ = api("DELETE", f"/v1/endpoints/{long_id}")
    check(status == 204, f"delete the long-described endpoint: {status}")


def pages_fit_360px_without_horizontal_scroll(b, link):
    ctx = b.context(viewport={"width": 360, "height": 780})
    page = b.page(ctx)
    page.goto(link)
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    settle(page)
    for view, name in [("/deliveries", "portal-deliveries-360"), (f"/deliveries/{FAILED_DELIVERY}", "portal-delivery-360"),
                       ("/endpoints", None), (f"/endpoints/{FAILING_ENDPOINT}", "portal-endpoint-360"),
                       ("/incidents", None), ("/event-types", None), ("/endpoints/new", None)]:
        goto(page, view)
        if view == "/deliveries":
            expect(page.locator(".results tbody tr").first).to_be_visible()
        sw, cw = page.evaluate("[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
        check(sw <= cw, f"at 360 px, {view} scrolls sideways: scrollWidth {sw} > clientWidth {cw}")
        if name:
            shot(page, name)
    ctx.close()
    ctx = b.context(viewport={"width": 360, "height": 780})
    page = b.page(ctx)
    page.goto(f"{URL}/console")
    page.get_by_label("Admin token").fill(ADMIN)
    button(page, "Sign in").click()
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    settle(page)
    for view in ["/overview", "/accounts"]:
        goto(page, view)
        sw, cw = page.evaluate("[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
        check(sw <= cw, f"at 360 px, the console's {view} scrolls sideways: {sw} > {cw}")
    ctx.close()


def operator_purges_an_account_once_its_id_is_typed(b):
    ctx = b.context(viewport={"width": 1280, "height": 900})
    page = b.page(ctx)
    page.goto(f"{URL}/console")
    page.get_by_label("Admin token").fill(ADMIN)
    button(page, "Sign in").click()
    goto(page, "/accounts")
    expect(page.get_by_role("heading", name="Accounts", exact=True)).to_be_visible()
    settle(page)
    row = page.locator("tr", has=page.get_by_role("link", name=PURGE_ACCOUNT, exact=True))
    expect(row).to_have_count(1)
    row.get_by_role("button", name="Purge").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("cannot be undone")
    confirm = dialog.get_by_role("button", name="Purge account")
    typed = dialog.get_by_label("Type the account id to confirm")
    expect(typed).to_be_focused()
    expect(confirm).to_be_disabled()
    typed.fill(PURGE_ACCOUNT[:-1])
    expect(confirm).to_be_disabled()
    typed.fill(PURGE_ACCOUNT)
    expect(confirm).to_be_enabled()
    shot(page, "console-purge-confirm")
    confirm.click()
    expect(page.locator(".msg.ok")).to_contain_text(
        f"Account {PURGE_ACCOUNT} purged: 1 event, 1 delivery and 1 endpoint deleted.")
    expect(page.locator(".msg.ok")).to_have_attribute("role", "status")
    expect(page.locator("tr", has=page.get_by_role("link", name=PURGE_ACCOUNT, exact=True))).to_have_count(0)
    status, accounts, _ = api("GET", "/v1/accounts")
    check(status == 200 and PURGE_ACCOUNT not in [a["account_id"] for a in accounts["items"]],
          f"the purged account is still listed: {accounts}")
    ctx.close()


def keyboard_alone_reaches_and_presses_retry(page):
    goto(page, f"/deliveries/{FAILED_DELIVERY}")
    expect(attempts(page).first).to_be_visible()
    before = attempts(page).count()
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(80):
        page.keyboard.press("Tab")
        focused = page.evaluate("[document.activeElement.tagName, (document.activeElement.textContent || '').trim()]")
        if focused == ["BUTTON", "Retry"]:
            break
    else:
        raise CheckFailed("Tab never reached the Retry button")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    check(outline not in ("none", ""), f"the focused Retry button shows no focus outline ({outline!r})")
    page.keyboard.press("Enter")
    expect(attempts(page)).to_have_count(before + 1, timeout=25_000)


def incidents_are_honest_after_a_partial_scan_and_show_held_endpoints(b, portal):
    # The portal: the endpoint its breaker holds, with its waiting deliveries.
    goto(portal, "/incidents")
    held = portal.locator("section", has=portal.get_by_role("heading", name=re.compile("Held by their circuit breaker")))
    expect(held.get_by_role("heading")).to_have_text(re.compile(r"Held by their circuit breaker: \d+ endpoints?, \d+ deliver"))
    # Named by its description (its URL and id on hover).
    row = held.locator("tbody tr", has_text="Held by its breaker")
    expect(row).to_contain_text("open")
    check("fail/held" in row.get_by_role("link").first.get_attribute("title"), "the URL is on hover")
    expect(row.locator("td").last).to_have_text(re.compile(r"^[1-9]\d*$"))
    # The console over every account: more deliveries than one scan reads, and it says so.
    ctx = b.context(viewport={"width": 1280, "height": 900})
    page = b.page(ctx)
    page.goto(f"{URL}/console")
    page.get_by_label("Admin token").fill(ADMIN)
    button(page, "Sign in").click()
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    goto(page, "/incidents")
    expect(page.get_by_role("status").filter(has_text="Partial")).to_contain_text("only the newest 5,000 deliveries")
    expect(page.locator("main")).to_contain_text("Held by their circuit breaker")
    check("nothing to do" not in page.locator("main").inner_text(), "a partial scan never says there is nothing to do")
    # Every account's incidents: each names its account, and its endpoint by name, never by id.
    held_table = page.locator("table", has=page.locator("caption", has_text="Endpoints held by their circuit breaker"))
    expect(held_table).to_be_visible()
    incidents = page.locator("table", has=page.locator("caption", has_text=re.compile("^Incidents$")))
    for t in [held_table] + ([incidents] if incidents.count() else []):
        caption = t.locator("caption").inner_text()
        expect(t.locator("thead")).to_contain_text("Account")
        names = t.locator("tbody a.ep-name").all_inner_texts()
        check(names and not [n for n in names if n.startswith("ep_")], f"{caption}: endpoints named, not ids: {names}")
    check("half_open" not in page.locator("main").inner_text(), "breaker states read in words")
    shot(page, "console-incidents-partial")
    shot(page, "doc-console-incidents", full=False)
    ctx.close()


def console_sees_incidents_and_event_types(page):
    goto(page, "/incidents")
    expect(page.get_by_role("heading", name="Incidents", exact=True)).to_be_visible()
    row = page.locator("tbody tr", has_text="http_error").first
    expect(row).to_contain_text("500")
    shot(page, "portal-incidents")
    goto(page, "/event-types")
    expect(page.get_by_role("heading", name="order.created")).to_be_visible()
    expect(page.locator("main")).to_contain_text("deprecated")
    # A deprecated type names its replacement, linked to the replacement's entry
    # (docs/api.md, "Versioning").
    old = page.locator("#et-profile\\.updated")
    expect(old.locator(".deprecation")).to_have_text("Deprecated — use profile.changed instead.")
    old.get_by_role("link", name="profile.changed").click()
    expect(page.locator("#et-profile\\.changed")).to_be_focused()
    shot(page, "portal-event-types")


def axe_finds_no_violations_on_portal_and_console(b, link):
    ctx = b.context(viewport={"width": 1280, "height": 900})
    page = b.page(ctx)
    page.goto(link)
    expect(page.get_by_role("heading", name="Endpoints", exact=True)).to_be_visible()
    settle(page)
    for view in ["/endpoints", f"/endpoints/{FAILING_ENDPOINT}", "/endpoints/new", "/deliveries",
                 f"/deliveries/{FAILED_DELIVERY}", "/incidents", "/event-types"]:
        goto(page, view)
        check_axe(page, f"the portal's {view}")
    ctx.close()
    ctx = b.context(viewport={"width": 1280, "height": 900})
    page = b.page(ctx)
    page.goto(f"{URL}/console")
    check_axe(page, "the console's sign-in")
    page.get_by_label("Admin token").fill(ADMIN)
    button(page, "Sign in").click()
    expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
    settle(page)
    for view in ["/overview", "/accounts", f"/endpoints?account_id={ACCOUNT}", f"/deliveries/{FAILED_DELIVERY}"]:
        goto(page, view)
        check_axe(page, f"the console's {view}")
    ctx.close()


# ----------------------------------------------------------------------------------------------


def main():
    results = []

    def run(name, fn, *args):
        t = time.time()
        try:
            out = fn(*args)
        except (CheckFailed, AssertionError, PlaywrightError, PlaywrightTimeout) as e:
            print(f"FAIL {name} ({time.time() - t:.1f}s): {e}", flush=True)
            if not isinstance(e, CheckFailed):
                traceback.print_exc()
            for page_ctx in browser.browser.contexts:
                for p in page_ctx.pages:
                    try:
                        shot(p, f"FAILED-{name}")
                        print(f"  page {p.url}; screenshot {SHOTS / ('FAILED-' + name + '.png')}")
                        print("  text:", p.locator("body").inner_text()[:1500].replace("\n", " | "))
                    except PlaywrightError:
                        pass
            print(f"{len(results)} passed, 1 failed", flush=True)
            sys.exit(1)
        results.append(name)
        print(f"ok   {name} ({time.time() - t:.1f}s)", flush=True)
        return out

    started = time.time()
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("FAILED-*.png"):
        old.unlink()  # from an earlier run: the screenshots left are this run's
    with sync_playwright() as pw:
        global browser
        browser = Browser(pw)
        run("pages_carry_csp_and_frame_ancestors", pages_carry_csp_and_frame_ancestors)
        link = run("operator_signs_in_sees_overview_and_mints_portal_link", operator_signs_in_sees_overview_and_mints_portal_link, browser)
        ctx, page = run("customer_opens_link_and_sees_only_their_account", customer_opens_link_and_sees_only_their_account, browser, link)
        run("a_delivery_held_by_the_breaker_says_so_and_retry_says_what_happens",
            a_delivery_held_by_the_breaker_says_so_and_retry_says_what_happens, page)
        run("customer_creates_endpoint_sends_test_event_and_finds_it_in_log", customer_creates_endpoint_sends_test_event_and_finds_it_in_log, page)
        run("customer_sets_a_payload_filter_and_tests_it_against_a_recent_event",
            customer_sets_a_payload_filter_and_tests_it_against_a_recent_event, page)
        run("a_disabled_endpoint_says_why_and_resumes", a_disabled_endpoint_says_why_and_resumes, page)
        run("customer_pauses_edits_rotates_verifies_replays_and_deletes_endpoint",
            customer_pauses_edits_rotates_verifies_replays_and_deletes_endpoint, page)
        run("customer_opens_failed_delivery_and_retries", customer_opens_failed_delivery_and_retries, page)
        run("payload_and_response_body_render_as_text", payload_and_response_body_render_as_text, page, browser)
        run("keyboard_alone_reaches_and_presses_retry", keyboard_alone_reaches_and_presses_retry, page)
        run("recover_shows_count_before_confirming", recover_shows_count_before_confirming, page)
        run("customer_sees_incidents_and_event_types", console_sees_incidents_and_event_types, page)
        run("incidents_are_honest_after_a_partial_scan_and_show_held_endpoints",
            incidents_are_honest_after_a_partial_scan_and_show_held_endpoints, browser, page)
        run("customer_sets_alert_addresses_with_field_errors", customer_sets_alert_addresses_with_field_errors, page)
        run("read_only_session_shows_no_changing_controls", read_only_session_shows_no_changing_controls, browser)
        run("pages_fit_360px_without_horizontal_scroll", pages_fit_360px_without_horizontal_scroll, browser, link)
        run("the_chart_keeps_every_digit_of_large_counts", the_chart_keeps_every_digit_of_large_counts, browser, link)
        run("nothing_overflows_at_1280_and_390_px_with_a_300_character_description",
            nothing_overflows_at_1280_and_390_px_with_a_300_character_description, browser, link)
        run("operator_purges_an_account_once_its_id_is_typed", operator_purges_an_account_once_its_id_is_typed, browser)
        run("axe_finds_no_violations_on_portal_and_console", axe_finds_no_violations_on_portal_and_console, browser, link)
        run("no_dialog_script_error_or_csp_violation_anywhere", browser.assert_clean, "the whole run")
        ctx.close()
        browser.close()
    print(f"{len(results)} passed, 0 failed in {time.time() - started:.1f}s; screenshots in {SHOTS}", flush=True)


if __name__ == "__main__":
    main()
