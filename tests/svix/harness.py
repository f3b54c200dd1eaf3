"""Shared pieces of the Svix drivers (drive.py with svix 2.x, drive1.py with svix 1.x).

Nothing here imports the Svix client API: only the webhook verifiers, which both library
generations ship (`svix.webhooks.Webhook`) beside the Standard Webhooks library
(`standardwebhooks.Webhook`). The driver that imports this module decides which `svix` is on
`sys.path`.

- `Receiver`: an HTTP server on 127.0.0.1:0 in a thread. It answers every request `200 ok`,
  records it (path, lowercase headers, raw body bytes) and verifies it twice: with
  `svix.webhooks.Webhook(secret)` given only the `svix-*` headers and with
  `standardwebhooks.Webhook(secret)` given only the `webhook-*` headers, trying each secret the
  driver registered for that path. A request that no known secret verifies is kept and tried again
  at the end (a secret learned from a rotation a moment after herald signed with it); what still
  fails then is a failure.
- `check`, `fail`, `step`: loud assertions; `expect_error`: a call that must raise with a status.
- `wait_for`: polling with a deadline; `collect`: follows `iterator` until `done`.
- `raw`: plain urllib requests (no proxy) for what the libraries cannot send.
"""

import base64
import json
import os
import secrets as pysecrets
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import standardwebhooks
import svix.webhooks

# The herald under test is on loopback: never send it through a proxy from the environment.
for _var in ("NO_PROXY", "no_proxy"):
    _cur = os.environ.get(_var, "")
    os.environ[_var] = ",".join(x for x in (_cur, "127.0.0.1", "localhost", "::1") if x)

POLL_INTERVAL = 0.1
DEADLINE = 20.0

SVIX_HEADERS = ("svix-id", "svix-timestamp", "svix-signature")
WEBHOOK_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


class CheckFailed(Exception):
    pass


_current_step = ["(start)"]


def step(name):
    _current_step[0] = name
    print(f"-- {name}", flush=True)


def fail(msg):
    raise CheckFailed(msg)


def check(cond, msg):
    if not cond:
        fail(msg)


def check_eq(got, want, what):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")


def env(name):
    value = os.environ.get(name)
    if not value:
        print(f"FAIL: set {name}", file=sys.stderr)
        sys.exit(2)
    return value


def new_secret(nbytes=32, prefix=True):
    """A Svix-style secret: whsec_ + standard base64 (padded) of `nbytes` random bytes."""
    b64 = base64.b64encode(pysecrets.token_bytes(nbytes)).decode()
    return ("whsec_" + b64) if prefix else b64


def secret_bytes(secret):
    s = secret[len("whsec_"):] if secret.startswith("whsec_") else secret
    return base64.b64decode(s, validate=True)


def run_id():
    return pysecrets.token_hex(4)


def wait_for(what, fn, timeout=DEADLINE, interval=POLL_INTERVAL):
    """Calls fn() until it returns something truthy; fails after `timeout` seconds.

    fn may return (value, description): a falsy value keeps polling and the last
    description goes into the failure message."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        out = fn()
        if isinstance(out, tuple) and len(out) == 2:
            value, last = out
        else:
            value = out
        if value:
            return value
        if time.monotonic() >= deadline:
            fail(f"timed out after {timeout:.0f} s waiting for {what}" + (f"; last: {last}" if last else ""))
        time.sleep(interval)


def collect(fetch, what, limit=1, max_pages=5000):
    """Pages through a list with `limit` items a page, following `iterator` until `done`.

    fetch(limit, iterator) returns the library's list response (`data`, `iterator`, `done`)."""
    items = []
    iterator = None
    seen = set()
    for _ in range(max_pages):
        page = fetch(limit, iterator)
        check(isinstance(page.data, list), f"{what}: data is not a list")
        check(len(page.data) <= limit, f"{what}: {len(page.data)} items on a page of limit={limit}")
        items.extend(page.data)
        if page.done:
            check(page.iterator is None, f"{what}: done=true but iterator={page.iterator!r} (docs/svix.md: null when done)")
            return items
        check(page.iterator, f"{what}: done=false but no iterator")
        check(page.iterator not in seen, f"{what}: iterator {page.iterator!r} came back twice")
        seen.add(page.iterator)
        iterator = page.iterator
    fail(f"{what}: still not done after {max_pages} pages")


def status_of(exc):
    """The HTTP status a Svix library exception carries (0 if none)."""
    return getattr(exc, "status_code", 0)


def expect_error(what, fn, statuses, code=None, errors=()):
    """fn() must raise one of the library's HTTP errors with a status in `statuses`.

    `errors` is the tuple of exception classes (HttpError, HTTPValidationError). Returns the
    exception."""
    if isinstance(statuses, int):
        statuses = (statuses,)
    try:
        out = fn()
    except errors as e:
        st = status_of(e)
        check(st in statuses, f"{what}: HTTP {st} ({e}), want {' or '.join(map(str, statuses))}")
        if code is not None:
            check_eq(getattr(e, "code", None), code, f"{what}: error code")
        return e
    fail(f"{what}: want HTTP {' or '.join(map(str, statuses))}, but the call succeeded ({out!r:.200})")


_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def raw(base, method, path, token=None, body=None, content_type="application/json", timeout=15):
    """One plain HTTP request. Returns (status, lowercase headers, body bytes)."""
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if data is not None and content_type:
        req.add_header("Content-Type", content_type)
    try:
        with _opener.open(req, timeout=timeout) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def raw_json(what, status_body):
    status, headers, body = status_body
    try:
        out = json.loads(body)
    except ValueError:
        fail(f"{what}: HTTP {status} with a body that is not JSON: {body[:200]!r}")
    check(isinstance(out, dict), f"{what}: HTTP {status} with a JSON body that is not an object: {body[:200]!r}")
    return out


def verify_svix(secret, body, headers):
    """svix's verifier, given only the svix-* headers. Raises on failure."""
    only = {k: headers[k] for k in SVIX_HEADERS if k in headers}
    svix.webhooks.Webhook(secret).verify(body, only)


def verify_std(secret, body, headers):
    """The Standard Webhooks verifier, given only the webhook-* headers. Raises on failure."""
    only = {k: headers[k] for k in WEBHOOK_HEADERS if k in headers}
    standardwebhooks.Webhook(secret).verify(body, only)


def verifies_with(req, secret):
    """(svix ok, standardwebhooks ok) for one recorded request and one secret."""
    out = []
    for fn in (verify_svix, verify_std):
        try:
            fn(secret, req["body"], req["headers"])
            out.append(True)
        except Exception:
            out.append(False)
    return tuple(out)


class Receiver:
    def __init__(self):
        self.cond = threading.Condition()
        self.requests = []  # dicts: path, headers, body, at
        self.secrets = {}  # path -> [secret, ...]
        self.failures = []
        self.unverified = []  # requests no known secret verified yet
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self):
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def do_POST(self):
                body = self._body()
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver._record(self.path.lstrip("/").split("?")[0], headers, body)
                out = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_PUT = do_POST

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}"

    def add_secret(self, path, secret):
        with self.cond:
            self.secrets.setdefault(path, []).append(secret)

    def _verify(self, req):
        """None if a known secret verifies the request with both libraries, else why not."""
        secrets = self.secrets.get(req["path"], [])
        if not secrets:
            return "no secret registered for this path"
        svix_ok = any(verifies_with(req, s)[0] for s in secrets)
        std_ok = any(verifies_with(req, s)[1] for s in secrets)
        if svix_ok and std_ok:
            return None
        why = []
        if not svix_ok:
            why.append("svix.webhooks.Webhook on the svix-* headers refused it")
        if not std_ok:
            why.append("standardwebhooks.Webhook on the webhook-* headers refused it")
        return "; ".join(why)

    def _record(self, path, headers, body):
        req = {"path": path, "headers": headers, "body": body, "at": time.time()}
        with self.cond:
            self.requests.append(req)
            if self._verify(req) is not None:
                self.unverified.append(req)
            self.cond.notify_all()

    def finish_verification(self):
        """Retries the requests no secret verified when they came; returns the failures."""
        with self.cond:
            for req in self.unverified:
                why = self._verify(req)
                if why is not None:
                    self.failures.append(
                        f"/{req['path']} svix-id={req['headers'].get('svix-id')!r} "
                        f"webhook-id={req['headers'].get('webhook-id')!r}: {why}"
                    )
            self.unverified = []
            return list(self.failures)

    def got(self, path, msg_id=None):
        """The requests recorded for `path` (and svix-id `msg_id`), oldest first."""
        with self.cond:
            return [
                r for r in self.requests
                if r["path"] == path and (msg_id is None or r["headers"].get("svix-id") == msg_id)
            ]

    def ids(self, path):
        with self.cond:
            return {r["headers"].get("svix-id") for r in self.requests if r["path"] == path}

    def describe(self, path):
        with self.cond:
            reqs = [r for r in self.requests if r["path"] == path]
            return f"/{path} got {len(reqs)} request(s), svix-id/webhook-id: " + ", ".join(
                f"{r['headers'].get('svix-id')}/{r['headers'].get('webhook-id')}" for r in reqs)

    def wait(self, what, path, msg_id, count=1, timeout=DEADLINE):
        """Waits until `path` got at least `count` requests with svix-id `msg_id`."""
        return wait_for(
            f"{what}: {count} request(s) with svix-id {msg_id} at /{path}",
            lambda: (len(self.got(path, msg_id)) >= count, f"{len(self.got(path, msg_id))} so far; {self.describe(path)}"),
            timeout=timeout,
        ) and self.got(path, msg_id)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def run(label, main):
    """Runs main(); on the first failure prints where and why and exits 1."""
    try:
        main()
    except CheckFailed as e:
        print(f"FAIL [{label}] at step '{_current_step[0]}': {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    except Exception as e:  # a library error the walk did not expect: name it with the step
        traceback.print_exc()
        extra = ""
        if hasattr(e, "status_code"):
            extra = f" (HTTP {e.status_code})"
        if type(e).__module__.startswith("pydantic"):
            extra = " (herald's answer does not fit the library's response model: a required field is missing or has the wrong type or value)"
        print(
            f"FAIL [{label}] at step '{_current_step[0]}': unexpected {type(e).__module__}.{type(e).__name__}{extra}: {e}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1)
