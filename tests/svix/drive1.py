#!/usr/bin/env python3
"""Drives herald's Svix-compatible API (docs/svix.md) with Python's last 1.x `svix` release, on the
endpoint and message flows, with the 1.x field names (`filterTypes`, `rateLimit`, `version: 1`).

    python3 -m pip install --target tests/svix/.py1 -r tests/svix/requirements1.txt
    PYTHONPATH=tests/svix/.py1 HERALD_URL=http://127.0.0.1:PORT HERALD_ADMIN_TOKEN=... \\
        HERALD_INGEST_TOKEN=... python3 tests/svix/drive1.py

Same herald set-up and receiver as drive.py (see its docstring). 1.x differs from 2.x where a
server can trip over it: endpoints are read with `filterTypes`, `rateLimit` and a required
`version`; a message list or get without `with_content` expects payloads (Svix's default is true
when the parameter is absent); `rotate_secret` ignores the answer's body. The last line is
`svix-python1: all checks passed`.
"""

import json
import sys

import harness
from harness import check, check_eq, collect, expect_error, fail, step, wait_for

import svix

if not svix.__version__.startswith("1."):
    sys.exit(f"FAIL: svix {svix.__version__} imported from {svix.__file__}, this driver needs 1.x: run it with PYTHONPATH=tests/svix/.py1 after: python3 -m pip install --target tests/svix/.py1 -r tests/svix/requirements1.txt")

from svix.api import (  # noqa: E402
    ApplicationIn,
    EndpointHeadersIn,
    EndpointHeadersPatchIn,
    EndpointIn,
    EndpointListOptions,
    EndpointPatch,
    EndpointSecretRotateIn,
    EndpointUpdate,
    MessageAttemptListByMsgOptions,
    MessageAttemptTriggerType,
    MessageCreateOptions,
    MessageGetOptions,
    MessageIn,
    MessageListOptions,
    MessageStatus,
    Svix,
    SvixOptions,
)
from svix.exceptions import HttpError, HTTPValidationError

LABEL = "svix-python1"
ERRORS = (HttpError, HTTPValidationError)
CREATED = "order.created"
REFUNDED = "order.refunded"


def err(what, fn, statuses, code=None):
    return expect_error(what, fn, statuses, code=code, errors=ERRORS)


class Walk1:
    def __init__(self):
        self.base = harness.env("HERALD_URL").rstrip("/")
        self.svx = Svix(harness.env("HERALD_ADMIN_TOKEN"), SvixOptions(server_url=self.base, retry_schedule=[]))
        self.ingest_token = harness.env("HERALD_INGEST_TOKEN")
        self.run = harness.run_id()
        self.rx = harness.Receiver()
        self.sent = {}
        self.expect = {}

    def uid(self, name):
        return f"drv1-{self.run}-{name}"

    def send(self, event_type, to, *, svx=None, options=None, **kw):
        payload = kw.pop("payload", None) or {"n": len(self.sent) + 1, "run": self.run, "lib": "1.x"}
        msg = (svx or self.svx).message.create(self.app.id, MessageIn(event_type=event_type, payload=payload, **kw), options or MessageCreateOptions())
        check(msg.id, "message without id")
        check_eq(msg.event_type, event_type, f"message {msg.id} eventType")
        for k in ("channels", "tags"):
            if k in kw:
                check_eq(sorted(getattr(msg, k) or []), sorted(kw[k]), f"message {msg.id} {k}")
        if "event_id" in kw:
            check_eq(msg.event_id, kw["event_id"], f"message {msg.id} eventId")
        if msg.id not in self.sent:
            self.sent[msg.id] = dict(type=event_type, payload=payload, channels=set(kw.get("channels") or []), tags=set(kw.get("tags") or []))
            for path in to:
                self.expect.setdefault(path, set()).add(msg.id)
        return msg

    def delivered(self, msg, path, count=1):
        reqs = self.rx.wait(f"delivery of {msg.id}", path, msg.id, count=count)
        for r in reqs:
            try:
                body = json.loads(r["body"])
            except ValueError:
                fail(f"/{path} request for {msg.id}: body is not JSON: {r['body'][:200]!r}")
            check_eq(body, self.sent[msg.id]["payload"], f"/{path} request body for {msg.id}")
        return reqs

    def list_msgs(self, **opts):
        return collect(lambda limit, it: self.svx.message.list(self.app.id, MessageListOptions(limit=limit, iterator=it, **opts)),
                       "messages", limit=2)

    def attempts(self, msg_id, **opts):
        return collect(lambda limit, it: self.svx.message_attempt.list_by_msg(self.app.id, msg_id, MessageAttemptListByMsgOptions(limit=limit, iterator=it, **opts)),
                       f"attempts of {msg_id}", limit=50)

    def main(self):
        print(f"svix {svix.__version__}, receiver on 127.0.0.1:{self.rx.port}, run {self.run}", flush=True)
        self.endpoints()
        self.messages()
        self.final()
        step("receiver: every request verified with both libraries")
        failures = self.rx.finish_verification()
        check(not failures, f"{len(failures)} request(s) failed verification:\n  " + "\n  ".join(failures))
        self.rx.close()
        print(f"{len(self.rx.requests)} deliveries verified", flush=True)
        print(f"{LABEL}: all checks passed", flush=True)

    def endpoints(self):
        svx = self.svx
        step("application for the 1.x walk")
        self.app = app = svx.application.create(ApplicationIn(name="drive 1.x", uid=self.uid("app")))
        check_eq(app.id, self.uid("app"), "application id")

        step("endpoints: create with filterTypes, rateLimit, version 1, uid, metadata, secret")
        s1 = harness.new_secret(32)
        self.rx.add_secret("one", s1)
        ep = svx.endpoint.create(app.id, EndpointIn(
            url=self.rx.url("one"), version=1, filter_types=[CREATED], rate_limit=7, uid=self.uid("ep"),
            metadata={"gen": "1"}, description="1.x endpoint", secret=s1))
        check_eq(ep.version, 1, "endpoint version")
        check_eq(ep.filter_types, [CREATED], "endpoint filterTypes")
        check_eq(ep.rate_limit, 7, "endpoint rateLimit")
        check_eq(ep.throttle_rate, 7, "endpoint throttleRate (emitted beside rateLimit)")
        check_eq(ep.uid, self.uid("ep"), "endpoint uid")
        check_eq(ep.metadata, {"gen": "1"}, "endpoint metadata")
        check_eq(ep.url, self.rx.url("one"), "endpoint url")
        self.ep, self.s1 = ep, s1

        s2 = harness.new_secret(40)
        self.rx.add_secret("chan", s2)
        ch = svx.endpoint.create(app.id, EndpointIn(url=self.rx.url("chan"), version=1, channels=["ch-1"], secret=s2))
        check_eq(ch.channels, ["ch-1"], "endpoint channels")
        check_eq(ch.version, 1, "endpoint version")
        check(not ch.filter_types, f"endpoint created without filterTypes has {ch.filter_types!r}")
        self.ch = ch

        step("endpoints: get by id and uid, list")
        g = svx.endpoint.get(app.id, self.uid("ep"))
        check_eq((g.id, g.version, g.filter_types, g.rate_limit), (ep.id, 1, [CREATED], 7), "endpoint read by uid")
        ids = {e.id for e in collect(lambda limit, it: svx.endpoint.list(app.id, EndpointListOptions(limit=limit, iterator=it)), "endpoints")}
        check_eq(ids, {ep.id, ch.id}, "endpoints listed")
        for e in svx.endpoint.list(app.id).data:
            check_eq(e.version, 1, f"version of listed endpoint {e.id}")

        step("endpoints: update (PUT) with filterTypes and rateLimit, then PATCH")
        u = svx.endpoint.update(app.id, ep.id, EndpointUpdate(
            url=self.rx.url("one"), version=1, filter_types=[CREATED, REFUNDED], rate_limit=9, uid=self.uid("ep"),
            metadata={"gen": "1u"}, description="updated"))
        check_eq(sorted(u.filter_types or []), [CREATED, REFUNDED], "filterTypes after PUT")
        check_eq(u.rate_limit, 9, "rateLimit after PUT")
        check_eq(u.description, "updated", "description after PUT")
        p = svx.endpoint.patch(app.id, ep.id, EndpointPatch(filter_types=[CREATED], rate_limit=3))
        check_eq(p.filter_types, [CREATED], "filterTypes after PATCH")
        check_eq(p.rate_limit, 3, "rateLimit after PATCH")
        check_eq(p.description, "updated", "PATCH must keep the description")
        check_eq(p.version, 1, "version after PATCH")

        step("endpoints: secret, rotate (1.x ignores the answer's body), headers")
        check_eq(svx.endpoint.get_secret(app.id, ep.id).key, s1, "get_secret")
        s3 = harness.new_secret(32)
        out = svx.endpoint.rotate_secret(app.id, ep.id, EndpointSecretRotateIn(key=s3))
        check(out is None, "1.x rotate_secret returns None")
        self.rx.add_secret("one", s3)
        check_eq(svx.endpoint.get_secret(app.id, ep.id).key, s3, "get_secret after rotate")
        self.s3 = s3
        svx.endpoint.update_headers(app.id, ep.id, EndpointHeadersIn(headers={"X-One": "a", "X-Two": "b"}))
        svx.endpoint.patch_headers(app.id, ep.id, EndpointHeadersPatchIn(headers={"X-One": "c"}, delete_headers=["X-Two"]))
        h = svx.endpoint.get_headers(app.id, ep.id)
        check_eq({k.lower(): v for k, v in h.headers.items()}, {"x-one": "c"}, "headers after update_headers + patch_headers")
        check(isinstance(h.sensitive, list), "headers.sensitive is not a list")

        step("endpoints: disable with PATCH and back with PUT")
        check_eq(svx.endpoint.patch(app.id, ch.id, EndpointPatch(disabled=True)).disabled, True, "disabled after PATCH")
        back = svx.endpoint.update(app.id, ch.id, EndpointUpdate(url=self.rx.url("chan"), version=1, channels=["ch-1"], disabled=False))
        check(not back.disabled, "disabled after PUT disabled=false")
        check_eq(back.channels, ["ch-1"], "channels after PUT")

    def messages(self):
        svx, app = self.svx, self.app
        step("messages: create (1.x always asks with_content=false and fills the payload itself)")
        e1 = self.uid("evt")
        m1 = self.send(CREATED, ["one", "chan"], channels=["ch-1"], tags=["a"], event_id=e1)
        m2 = self.send(REFUNDED, [], tags=["b"])  # the 1.x endpoint now takes order.created only
        m3 = self.send(CREATED, ["one"], tags=["a"])
        check_eq(m1.payload, self.sent[m1.id]["payload"], "1.x message.create fills the payload from its input")
        self.m1, self.m2, self.m3 = m1, m2, m3

        step("messages: duplicate eventId answers 409; a repeated idempotency-key one message")
        err("a message with an eventId already used", lambda: svx.message.create(app.id, MessageIn(event_type=CREATED, payload={}, event_id=e1)), 409)
        key = self.uid("key")
        m4 = self.send(CREATED, ["one"], payload={"idem": self.run}, options=MessageCreateOptions(idempotency_key=key))
        again = svx.message.create(app.id, MessageIn(event_type=CREATED, payload={"idem": self.run}), MessageCreateOptions(idempotency_key=key))
        check_eq(again.id, m4.id, "message id for a repeated idempotency-key")
        self.m4 = m4

        step("messages: list and get without with_content carry the payload (1.x default)")
        items = self.list_msgs()
        check_eq({m.id for m in items}, {m1.id, m2.id, m3.id, m4.id}, "messages listed")
        for m in items:
            check_eq(m.payload, self.sent[m.id]["payload"], f"payload of {m.id} listed without with_content")
        for m in self.list_msgs(with_content=False):
            check_eq(m.payload, {}, f"payload of {m.id} listed with_content=false")
        g = svx.message.get(app.id, e1)
        check_eq((g.id, g.payload), (m1.id, self.sent[m1.id]["payload"]), "message by eventId without with_content")
        check_eq(svx.message.get(app.id, m1.id, MessageGetOptions(with_content=False)).payload, {}, "message read with_content=false")

        step("messages: list filters event_types, channel, tag")
        check_eq({m.id for m in self.list_msgs(event_types=[REFUNDED])}, {m2.id}, "event_types filter")
        check_eq({m.id for m in self.list_msgs(channel="ch-1")}, {m1.id}, "channel filter")
        check_eq({m.id for m in self.list_msgs(tag="a")}, {m1.id, m3.id}, "tag filter")

        step("messages: delivered by filterTypes and channels, signed with the rotated secret")
        for m in (m1, m3, m4):
            req = self.delivered(m, "one")[0]
            check_eq(harness.verifies_with(req, self.s3), (True, True), f"the rotated secret verifies {m.id}")
            check_eq(req["headers"].get("x-one"), "c", f"custom header on {m.id}")
        self.delivered(m1, "chan")

        step("attempts: by message, then resend")
        def ok():
            atts = [a for a in self.attempts(m1.id) if a.endpoint_id == self.ep.id]
            return [a for a in atts if a.status == MessageStatus.SUCCESS], f"{[(int(a.status), a.status_text.value) for a in atts]}"
        att = wait_for(f"a successful attempt of {m1.id}", ok)[0]
        check_eq((att.msg_id, att.url, att.response_status_code, att.trigger_type), (m1.id, self.rx.url("one"), 200, MessageAttemptTriggerType.SCHEDULED), "attempt")
        check_eq(att.response, "ok", "attempt response (1.x default with_content)")
        svx.message_attempt.resend(app.id, m1.id, self.ep.id)
        wait_for(f"a manual attempt of {m1.id}", lambda: [a for a in self.attempts(m1.id, endpoint_id=self.ep.id) if a.trigger_type == MessageAttemptTriggerType.MANUAL and a.status == MessageStatus.SUCCESS])
        reqs = self.delivered(m1, "one", count=2)
        check_eq(reqs[1]["headers"].get("svix-id"), reqs[0]["headers"].get("svix-id"), "svix-id of the resent request")

        step("ingest token: creates a message, cannot create an endpoint")
        ing = Svix(self.ingest_token, SvixOptions(server_url=self.base, retry_schedule=[]))
        m5 = self.send(CREATED, ["one", "chan"], svx=ing, channels=["ch-1"])
        self.delivered(m5, "one")
        err("ingest token: create an endpoint", lambda: ing.endpoint.create(app.id, EndpointIn(url=self.rx.url("x"), version=1)), 403)

    def final(self):
        step("deliveries: each endpoint got exactly its messages")
        last = self.send(CREATED, ["one", "chan"], channels=["ch-1"])
        for path in ("one", "chan"):
            self.delivered(last, path)
        for path, want in self.expect.items():
            for msg_id in want:
                self.rx.wait("expected delivery", path, msg_id)
        for path in ("one", "chan", "x"):
            check_eq(self.rx.ids(path), self.expect.get(path, set()), f"messages received at /{path}")


if __name__ == "__main__":
    harness.run(LABEL, lambda: Walk1().main())
