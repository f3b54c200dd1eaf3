#!/usr/bin/env python3
"""Drives herald's Svix-compatible API (docs/svix.md) with the official Python library, svix 2.x.

    python3 -m pip install -r tests/svix/requirements.txt
    HERALD_URL=http://127.0.0.1:PORT HERALD_ADMIN_TOKEN=... HERALD_INGEST_TOKEN=... \\
        python3 tests/svix/drive.py

herald must run with `[svix] enabled = true`, `[endpoints] require_verification = false`, plain
http to loopback allowed (`delivery.allow_http`, `delivery.allow_private_networks`), and the
catalog types `order.created` and `order.refunded`. The walk makes its own applications (uids
carry a random run id, so it can run twice against one herald), starts its own receiver on
127.0.0.1:0, and stops at the first check that fails, naming the step. Every request the receiver
gets is verified with `svix.webhooks.Webhook` (svix-* headers only) and with
`standardwebhooks.Webhook` (webhook-* headers only). The last line is
`svix-python: all checks passed`.
"""

import json
import sys
import time
from datetime import datetime, timedelta, timezone

import harness
from harness import check, check_eq, collect, expect_error, fail, raw, raw_json, step, wait_for

import svix

if not svix.__version__.startswith("2."):
    sys.exit(f"FAIL: svix {svix.__version__} imported from {svix.__file__}, this driver needs 2.x: install it: python3 -m pip install -r tests/svix/requirements.txt")

from svix.api import (  # noqa: E402
    ApplicationCreateOptions,
    ApplicationIn,
    ApplicationListOptions,
    ApplicationPatch,
    AppPortalAccessIn,
    AppUsageStatsIn,
    EndpointCreateOptions,
    EndpointHeadersIn,
    EndpointHeadersPatchIn,
    EndpointIn,
    EndpointListOptions,
    EndpointPatch,
    EndpointSecretRotateIn,
    EndpointUpsertIn,
    EventTypeIn,
    EventTypeListOptions,
    MessageAttemptListByEndpointOptions,
    MessageAttemptListByMsgOptions,
    MessageAttemptTriggerType,
    MessageCreateOptions,
    MessageGetOptions,
    MessageIn,
    MessageListOptions,
    MessageStatus,
    Ordering,
    StatusCodeClass,
    Svix,
    SvixOptions,
)
from svix.exceptions import HttpError, HTTPValidationError

LABEL = "svix-python"
ERRORS = (HttpError, HTTPValidationError)
CREATED = "order.created"
REFUNDED = "order.refunded"


def err(what, fn, statuses, code=None):
    return expect_error(what, fn, statuses, code=code, errors=ERRORS)


class Walk:
    def __init__(self):
        self.base = harness.env("HERALD_URL").rstrip("/")
        self.admin_token = harness.env("HERALD_ADMIN_TOKEN")
        self.ingest_token = harness.env("HERALD_INGEST_TOKEN")
        self.svx = self.client(self.admin_token)
        self.run = harness.run_id()
        self.rx = harness.Receiver()
        # msg id -> what was sent; (path -> ids) the receiver must get, exactly
        self.sent = {}
        self.expect = {}

    def client(self, token):
        # No retries: a 5xx must show up as a failure, not be papered over.
        return Svix(token, SvixOptions(server_url=self.base, retry_schedule=[]))

    def uid(self, name):
        return f"drv-{self.run}-{name}"

    def raw(self, method, path, token="admin", body=None, content_type="application/json"):
        tok = {"admin": self.admin_token, None: None}.get(token, token)
        return raw(self.base, method, path, token=tok, body=body, content_type=content_type)

    # -- messages ---------------------------------------------------------------------------

    def send(self, app_id, event_type, to, *, payload=None, channels=None, tags=None,
             event_id=None, svx=None, options=None, **extra):
        """Creates a message and records which receiver paths must get it (`to`)."""
        payload = payload if payload is not None else {"n": len(self.sent) + 1, "run": self.run, "nested": {"ok": True}}
        kw = dict(event_type=event_type, payload=payload)
        if channels is not None:
            kw["channels"] = channels
        if tags is not None:
            kw["tags"] = tags
        if event_id is not None:
            kw["event_id"] = event_id
        kw.update(extra)
        opts = options or MessageCreateOptions(with_content=True)
        msg = (svx or self.svx).message.create(app_id, MessageIn(**kw), opts)
        check(msg.id, "message without id")
        check_eq(msg.event_type, event_type, f"message {msg.id} eventType")
        if opts.with_content:
            check_eq(msg.payload, payload, f"message {msg.id} payload (with_content=true)")
        else:
            check_eq(msg.payload, {}, f"message {msg.id} payload (with_content=false)")
        if channels is not None:
            check_eq(sorted(msg.channels or []), sorted(channels), f"message {msg.id} channels")
        if tags is not None:
            check_eq(sorted(msg.tags or []), sorted(tags), f"message {msg.id} tags")
        if event_id is not None:
            check_eq(msg.event_id, event_id, f"message {msg.id} eventId")
        if msg.id not in self.sent:
            self.sent[msg.id] = dict(app=app_id, type=event_type, payload=payload,
                                     channels=set(channels or []), tags=set(tags or []),
                                     event_id=event_id, to=set(to))
            for path in to:
                self.expect.setdefault(path, set()).add(msg.id)
        return msg

    def delivered(self, msg, path, count=1):
        """Waits for `count` requests of `msg` at `path`; checks the body is the payload."""
        reqs = self.rx.wait(f"delivery of {msg.id}", path, msg.id, count=count)
        for r in reqs:
            h = r["headers"]
            for a, b in (("svix-id", "webhook-id"), ("svix-timestamp", "webhook-timestamp"), ("svix-signature", "webhook-signature")):
                check(h.get(a), f"/{path} request for {msg.id} has no {a} header")
                check_eq(h.get(a), h.get(b), f"/{path} request for {msg.id}: {a} vs {b}")
            try:
                body = json.loads(r["body"])
            except ValueError:
                fail(f"/{path} request for {msg.id}: body is not JSON: {r['body'][:200]!r}")
            check_eq(body, self.sent[msg.id]["payload"], f"/{path} request body for {msg.id}")
        return reqs

    def msg_ids(self, app_id, what, svx=None, **opts):
        items = collect(
            lambda limit, it: (svx or self.svx).message.list(app_id, MessageListOptions(limit=limit, iterator=it, **opts)),
            what, limit=opts.pop("limit", 2),
        )
        return [m.id for m in items], items

    def attempts_by_msg(self, app_id, msg_id, **opts):
        return collect(
            lambda limit, it: self.svx.message_attempt.list_by_msg(
                app_id, msg_id, MessageAttemptListByMsgOptions(limit=limit, iterator=it, **opts)),
            f"attempts of {msg_id}", limit=50,
        )

    def attempts_by_endpoint(self, app_id, ep_id, **opts):
        return collect(
            lambda limit, it: self.svx.message_attempt.list_by_endpoint(
                app_id, ep_id, MessageAttemptListByEndpointOptions(limit=limit, iterator=it, **opts)),
            f"attempts of {ep_id}", limit=50,
        )

    # -- the walk ---------------------------------------------------------------------------

    def main(self):
        print(f"svix {svix.__version__}, receiver on 127.0.0.1:{self.rx.port}, run {self.run}", flush=True)
        self.health()
        self.applications()
        self.endpoints()
        self.messages()
        self.attempts()
        self.secrets_and_headers()
        self.disable()
        self.event_types()
        self.portal()
        self.ingest()
        self.wrong_paths()
        self.malformed()
        self.unlisted()
        self.final_deliveries()
        step("receiver: every request verified with both libraries")
        failures = self.rx.finish_verification()
        check(not failures, f"{len(failures)} request(s) failed verification:\n  " + "\n  ".join(failures))
        check(self.rx.requests, "the receiver got no request at all")
        self.rx.close()
        print(f"{len(self.rx.requests)} deliveries verified", flush=True)
        print(f"{LABEL}: all checks passed", flush=True)

    def health(self):
        step("health: GET /api/v1/health (library, raw, trailing /)")
        self.svx.health.get()
        for path in ("/api/v1/health", "/api/v1/health/"):
            status, _, _ = self.raw("GET", path)
            check_eq(status, 204, f"GET {path}")

    def applications(self):
        svx = self.svx
        step("applications: create with a uid")
        u1 = self.uid("main")
        a1 = svx.application.create(ApplicationIn(name="drive main", uid=u1, metadata={"team": "one"}))
        check_eq(a1.id, u1, "application id (docs/svix.md: the uid when given)")
        check_eq(a1.uid, u1, "application uid")
        check_eq(a1.name, "drive main", "application name")
        check_eq(a1.metadata, {"team": "one"}, "application metadata")
        self.a1 = a1

        step("applications: create without a uid")
        a2 = svx.application.create(ApplicationIn(name="drive other"))
        check(a2.id.startswith("app_"), f"application id {a2.id!r} does not start with app_")
        check(a2.uid is None, f"application created without uid has uid {a2.uid!r}")
        check_eq(a2.metadata, {}, "metadata of an application created without any")
        self.a2 = a2

        step("applications: the same uid again without get_if_exists is a conflict")
        err("POST /api/v1/app with an existing uid", lambda: svx.application.create(ApplicationIn(name="again", uid=u1)), 409)

        step("applications: get_or_create (existing, then new)")
        same = svx.application.get_or_create(ApplicationIn(name="ignored", uid=u1))
        check_eq(same.id, a1.id, "get_or_create of an existing uid")
        check_eq(same.name, "drive main", "get_or_create must not change the existing application")
        u3 = self.uid("doomed")
        a3 = svx.application.get_or_create(ApplicationIn(name="drive doomed", uid=u3))
        check_eq(a3.id, u3, "get_or_create of a new uid")

        step("applications: an idempotency-key repeated gives the same application")
        key = f"drv-{self.run}-app-key"
        i1 = svx.application.create(ApplicationIn(name="drive idem"), ApplicationCreateOptions(idempotency_key=key))
        i2 = svx.application.create(ApplicationIn(name="drive idem"), ApplicationCreateOptions(idempotency_key=key))
        check_eq(i2.id, i1.id, "second POST /api/v1/app with the same idempotency-key")

        step("applications: list with limit=1, following iterator until done")
        seen = [a.id for a in collect(lambda limit, it: svx.application.list(ApplicationListOptions(limit=limit, iterator=it)), "application list")]
        for a in (a1, a2, a3, i1):
            check(a.id in seen, f"application {a.id} missing from the list")
        check_eq(seen.count(i1.id), 1, f"times {i1.id} (made twice with one idempotency-key) is listed")
        check_eq(len(seen), len(set(seen)), "applications listed twice across pages")

        step("applications: get by uid and by id")
        check_eq(svx.application.get(u1).id, a1.id, "GET /api/v1/app/{uid}")
        check_eq(svx.application.get(a2.id).name, "drive other", "GET /api/v1/app/{id}")

        step("applications: PUT (update) and PATCH")
        up = svx.application.upsert(a2.id, ApplicationIn(name="drive other renamed", metadata={"k": "v"}))
        check_eq(up.id, a2.id, "PUT keeps the id")
        check_eq(up.name, "drive other renamed", "name after PUT")
        check_eq(up.metadata, {"k": "v"}, "metadata after PUT")
        p = svx.application.patch(a1.id, ApplicationPatch(metadata={"team": "two", "x": "y"}))
        check_eq(p.metadata, {"team": "two", "x": "y"}, "metadata after PATCH")
        check_eq(p.name, "drive main", "PATCH of metadata must keep the name")
        p = svx.application.patch(a1.id, ApplicationPatch(name="drive main renamed"))
        check_eq(p.name, "drive main renamed", "name after PATCH")
        check_eq(p.metadata, {"team": "two", "x": "y"}, "PATCH of the name must keep the metadata")
        check_eq(svx.application.get(a1.id).name, "drive main renamed", "name read back after PATCH")

        step("applications: PUT on an absent application creates it with the path as uid")
        u5 = self.uid("put")
        a5 = svx.application.upsert(u5, ApplicationIn(name="drive put"))
        check_eq(a5.id, u5, "id of the application PUT created")
        check_eq(svx.application.get(u5).name, "drive put", "application PUT created, read back")

        step("applications: DELETE, then GET answers 404")
        svx.application.delete(a3.id)
        err(f"GET /api/v1/app/{a3.id} after DELETE", lambda: svx.application.get(a3.id), 404)
        seen = [a.id for a in collect(lambda limit, it: svx.application.list(ApplicationListOptions(limit=limit, iterator=it)), "application list", limit=50)]
        check(a3.id not in seen, "a deleted application is still listed")

        step("applications: a message naming `application` creates it")
        u6 = self.uid("auto")
        m = svx.message.create(u6, MessageIn(event_type=CREATED, payload={"auto": True}, application=ApplicationIn(name="drive auto", uid=u6)))
        check(m.id, "message without id")
        check_eq(svx.application.get(u6).name, "drive auto", "application created by a message")

    def endpoints(self):
        svx, a1, a2 = self.svx, self.a1, self.a2
        step("endpoints: create with secret, uid, metadata, eventTypes, channels, headers")
        s_main = harness.new_secret(32)
        self.rx.add_secret("main", s_main)
        ep_uid = self.uid("ep-main")
        ep = svx.endpoint.create(a1.id, EndpointIn(
            url=self.rx.url("main"), uid=ep_uid, description="main endpoint", metadata={"owner": "drive"},
            event_types=[CREATED, REFUNDED], secret=s_main, throttle_rate=10,
            headers={"X-Drive-Created": "yes"},
        ))
        check(ep.id.startswith("ep_"), f"endpoint id {ep.id!r} does not start with ep_")
        check_eq(ep.url, self.rx.url("main"), "endpoint url")
        check_eq(ep.uid, ep_uid, "endpoint uid")
        check_eq(ep.description, "main endpoint", "endpoint description")
        check_eq(ep.metadata, {"owner": "drive"}, "endpoint metadata")
        check_eq(sorted(ep.event_types or []), [CREATED, REFUNDED], "endpoint eventTypes")
        check_eq(ep.throttle_rate, 10, "endpoint throttleRate")
        check(not ep.disabled, "a new endpoint is disabled")
        self.ep_main, self.s_main = ep, s_main

        # Channel "ch-a" only, every type; its secret given unprefixed (read as base64, docs/svix.md).
        s_cha_b64 = harness.new_secret(24, prefix=False)
        self.rx.add_secret("cha", "whsec_" + s_cha_b64)
        cha = svx.endpoint.create(a1.id, EndpointIn(url=self.rx.url("cha"), channels=["ch-a"], secret=s_cha_b64))
        check_eq(sorted(cha.channels or []), ["ch-a"], "endpoint channels")
        check(not cha.event_types, f"endpoint created without eventTypes has {cha.event_types!r}")
        check_eq(cha.description, "", "description of an endpoint created without one")
        check_eq(cha.metadata, {}, "metadata of an endpoint created without any")
        check_eq(svx.endpoint.get_secret(a1.id, cha.id).key, "whsec_" + s_cha_b64,
                 "an unprefixed secret is stored as whsec_ + the same base64")
        self.ep_cha = cha

        step("endpoints: create with an idempotency-key twice, no secret given")
        key = f"drv-{self.run}-ep-key"
        ref1 = svx.endpoint.create(a1.id, EndpointIn(url=self.rx.url("refunded"), event_types=[REFUNDED]), EndpointCreateOptions(idempotency_key=key))
        ref2 = svx.endpoint.create(a1.id, EndpointIn(url=self.rx.url("refunded"), event_types=[REFUNDED]), EndpointCreateOptions(idempotency_key=key))
        check_eq(ref2.id, ref1.id, "second endpoint POST with the same idempotency-key")
        s_ref = svx.endpoint.get_secret(a1.id, ref1.id).key
        check(s_ref.startswith("whsec_"), f"generated secret {s_ref[:10]}... lacks whsec_")
        n = len(harness.secret_bytes(s_ref))
        check(24 <= n <= 64, f"generated secret decodes to {n} bytes")
        self.rx.add_secret("refunded", s_ref)
        self.ep_ref = ref1

        step("endpoints: an endpoint in the other application")
        s_other = harness.new_secret(64)
        self.rx.add_secret("other", s_other)
        self.ep_other = svx.endpoint.create(a2.id, EndpointIn(url=self.rx.url("other"), secret=s_other))

        step("endpoints: get by uid and by id; get_secret")
        check_eq(svx.endpoint.get(a1.id, ep_uid).id, ep.id, "GET endpoint by uid")
        check_eq(svx.endpoint.get(a1.id, ep.id).uid, ep_uid, "GET endpoint by id")
        check_eq(svx.endpoint.get_secret(a1.id, ep.id).key, s_main, "get_secret")
        check_eq(svx.endpoint.get_secret(a1.id, ep_uid).key, s_main, "get_secret by uid")

        step("endpoints: list (limit=1 pages; order ascending vs descending)")
        ids = [e.id for e in collect(lambda limit, it: svx.endpoint.list(a1.id, EndpointListOptions(limit=limit, iterator=it)), "endpoint list")]
        check_eq(sorted(ids), sorted([ep.id, cha.id, ref1.id]), "endpoints of the application")
        asc = [e.id for e in svx.endpoint.list(a1.id, EndpointListOptions(limit=250, order=Ordering.ASCENDING)).data]
        desc = [e.id for e in svx.endpoint.list(a1.id, EndpointListOptions(limit=250, order=Ordering.DESCENDING)).data]
        check_eq(sorted(asc), sorted(ids), "endpoints listed ascending")
        check_eq(desc, list(reversed(asc)), "order=descending must list the endpoints in reverse of order=ascending")

        step("endpoints: PATCH and PUT")
        p = svx.endpoint.patch(a1.id, ep.id, EndpointPatch(description="patched", metadata={"owner": "patch"}))
        check_eq(p.description, "patched", "description after PATCH")
        check_eq(p.metadata, {"owner": "patch"}, "metadata after PATCH")
        check_eq(p.uid, ep_uid, "PATCH must keep the uid")
        check_eq(sorted(p.event_types or []), [CREATED, REFUNDED], "PATCH must keep eventTypes")
        check_eq(p.url, self.rx.url("main"), "PATCH must keep the url")
        u = svx.endpoint.upsert(a1.id, ep.id, EndpointUpsertIn(
            url=self.rx.url("main"), uid=ep_uid, description="put", metadata={"owner": "put"},
            event_types=[CREATED, REFUNDED], throttle_rate=10))
        check_eq(u.id, ep.id, "PUT on an existing endpoint keeps its id")
        check_eq(u.description, "put", "description after PUT")
        check_eq(u.metadata, {"owner": "put"}, "metadata after PUT")
        check_eq(svx.endpoint.get_secret(a1.id, ep.id).key, s_main, "PUT must keep the secret")

        step("endpoints: PUT on an absent endpoint creates it with the path as uid; DELETE")
        put_uid = self.uid("ep-put")
        c = svx.endpoint.upsert(a2.id, put_uid, EndpointUpsertIn(url=self.rx.url("put")))
        check_eq(c.uid, put_uid, "uid of the endpoint PUT created")
        check(c.id.startswith("ep_"), f"endpoint id {c.id!r}")
        check_eq(svx.endpoint.get(a2.id, put_uid).id, c.id, "endpoint PUT created, read back by uid")
        svx.endpoint.delete(a2.id, c.id)
        err("GET a deleted endpoint", lambda: svx.endpoint.get(a2.id, c.id), 404)

    def messages(self):
        svx, a1, a2 = self.svx, self.a1, self.a2
        main, cha, ref = "main", "cha", "refunded"
        step("messages: create (eventType, payload, eventId, channels, tags)")
        e1 = self.uid("evt-1")
        m1 = self.send(a1.id, CREATED, [main, cha], channels=["ch-a"], tags=["t-one"], event_id=e1)
        m2 = self.send(a1.id, REFUNDED, [main, ref], channels=["ch-b"], tags=["t-two"], event_id=self.uid("evt-2"),
                       options=MessageCreateOptions())  # the library's default: with_content=false
        m3 = self.send(a1.id, CREATED, [main], tags=["t-one", "t-three"], payload_retention_period=30)
        self.m1, self.m2, self.m3 = m1, m2, m3
        check(m1.timestamp.tzinfo is not None, "message timestamp has no time zone")

        step("messages: a duplicate eventId answers 409 and creates nothing")
        before, _ = self.msg_ids(a1.id, "messages", limit=250)
        err("message with an eventId already used", lambda: svx.message.create(a1.id, MessageIn(event_type=CREATED, payload={"dup": 1}, event_id=e1)), 409, code="conflict")
        after, _ = self.msg_ids(a1.id, "messages", limit=250)
        check_eq(sorted(after), sorted(before), "messages after the refused duplicate")

        step("messages: deliverAt answers 422")
        err("message with deliverAt", lambda: svx.message.create(a1.id, MessageIn(event_type=CREATED, payload={}, deliver_at=datetime.now(timezone.utc) + timedelta(minutes=5))), 422)

        # A point in time between the messages above and those below (before/after filters).
        time.sleep(0.05)
        self.t_mid = datetime.now(timezone.utc)
        time.sleep(0.05)
        early = {m1.id, m2.id, m3.id}

        step("messages: the same idempotency-key twice gives one message")
        key = self.uid("msg-key")
        opts = MessageCreateOptions(with_content=True, idempotency_key=key)
        m4 = self.send(a1.id, REFUNDED, [main, ref], tags=["t-two"], options=opts, payload={"idem": self.run})
        again = svx.message.create(a1.id, MessageIn(event_type=REFUNDED, payload={"idem": self.run}, tags=["t-two"]), opts)
        check_eq(again.id, m4.id, "message id for a repeated idempotency-key")
        ids, _ = self.msg_ids(a1.id, "messages", limit=250)
        check_eq(ids.count(m4.id), 1, "times the idempotent message is listed")
        check_eq(len(ids), len(before) + 1, "messages after one idempotent message posted twice")
        m5 = self.send(a1.id, CREATED, [main, cha], channels=["ch-a", "ch-c"])
        self.m4, self.m5 = m4, m5
        mine = early | {m4.id, m5.id}

        step("messages: list (newest first, pages of 2, with_content)")
        ids, items = self.msg_ids(a1.id, "messages", with_content=True)
        check_eq(set(ids), mine, "messages of the application")
        stamps = [m.timestamp for m in items]
        check(all(a >= b for a, b in zip(stamps, stamps[1:])), f"messages not newest first: {stamps}")
        check(ids.index(m5.id) < ids.index(m1.id), "the newest message is not listed before the oldest")
        for m in items:
            check_eq(m.payload, self.sent[m.id]["payload"], f"payload of {m.id} listed with_content=true")
        _, items = self.msg_ids(a1.id, "messages without content")
        for m in items:
            check_eq(m.payload, {}, f"payload of {m.id} listed with_content=false")

        step("messages: list filters event_types, channel, tag, before, after")
        def only(what, **opts):
            ids, _ = self.msg_ids(a1.id, f"messages {what}", **opts)
            return set(ids)
        check_eq(only("event_types=order.refunded", event_types=[REFUNDED]), {m2.id, m4.id}, "event_types filter")
        check_eq(only("event_types=both", event_types=[REFUNDED, CREATED]), mine, "event_types filter with two types")
        check_eq(only("channel=ch-a", channel="ch-a"), {m1.id, m5.id}, "channel filter")
        check_eq(only("channel=ch-b", channel="ch-b"), {m2.id}, "channel filter")
        check_eq(only("tag=t-one", tag="t-one"), {m1.id, m3.id}, "tag filter")
        check_eq(only("tag=t-two", tag="t-two"), {m2.id, m4.id}, "tag filter")
        check_eq(only("before", before=self.t_mid), early, "before filter")
        check_eq(only("after", after=self.t_mid), {m4.id, m5.id}, "after filter")

        step("messages: get by id and by eventId, with and without content")
        g = svx.message.get(a1.id, m1.id, MessageGetOptions(with_content=True))
        check_eq((g.id, g.event_type, g.payload, g.event_id), (m1.id, CREATED, self.sent[m1.id]["payload"], e1), "message by id")
        check_eq(sorted(g.channels or []), ["ch-a"], "channels of the message read back")
        check_eq(sorted(g.tags or []), ["t-one"], "tags of the message read back")
        g = svx.message.get(a1.id, e1, MessageGetOptions(with_content=True))
        check_eq(g.id, m1.id, "message by eventId")
        check_eq(svx.message.get(a1.id, m1.id).payload, {}, "message read with with_content=false")
        err("a message of one application read under another", lambda: svx.message.get(a2.id, m1.id), 404)

        step("messages: deliveries reach the endpoints whose types and channels take them")
        self.delivered(m1, main)
        self.delivered(m1, cha)
        self.delivered(m2, ref)
        for m in (m2, m3, m4, m5):
            self.delivered(m, main)
        self.delivered(m5, cha)
        for m in (m1, m2, m3, m4, m5):
            check_eq(self.rx.got(main, m.id)[0]["headers"].get("x-drive-created"), "yes", f"custom header given at creation, on {m.id}")

    def attempts(self):
        svx, a1 = self.svx, self.a1
        ep, m1, m2 = self.ep_main, self.m1, self.m2
        step("attempts: list by message (poll until it exists)")
        def ok_attempt():
            atts = [a for a in self.attempts_by_msg(a1.id, m1.id) if a.endpoint_id == ep.id]
            return ([a for a in atts if a.status == MessageStatus.SUCCESS], f"attempts {[(a.endpoint_id, int(a.status)) for a in atts]}")
        att = wait_for(f"a successful attempt of {m1.id} to {ep.id}", ok_attempt)[0]
        check(att.id, "attempt without id")
        check_eq(att.msg_id, m1.id, "attempt msgId")
        check_eq(att.endpoint_id, ep.id, "attempt endpointId")
        check_eq(att.url, self.rx.url("main"), "attempt url")
        check_eq(att.response_status_code, 200, "attempt responseStatusCode")
        check_eq(att.status_text.value, "success", "attempt statusText")
        check_eq(att.trigger_type, MessageAttemptTriggerType.SCHEDULED, "attempt triggerType")
        check(att.response_duration_ms >= 0, "attempt responseDurationMs < 0")
        check(att.msg is None, "attempt carries msg without with_msg=true")
        with_body = [a for a in self.attempts_by_msg(a1.id, m1.id, with_content=True) if a.id == att.id]
        check(with_body, "attempt missing when listed with_content=true")
        check_eq(with_body[0].response, "ok", "attempt response (the receiver's body) with_content=true")
        wait_for(f"an attempt of {m1.id} to the ch-a endpoint", lambda: [a for a in self.attempts_by_msg(a1.id, m1.id) if a.endpoint_id == self.ep_cha.id])
        check(all(a.endpoint_id != self.ep_ref.id for a in self.attempts_by_msg(a1.id, m1.id)),
              "an attempt of an order.created message to the order.refunded endpoint")
        only = self.attempts_by_msg(a1.id, m1.id, endpoint_id=ep.id)
        check(only and all(a.endpoint_id == ep.id for a in only), f"endpoint_id filter: {[a.endpoint_id for a in only]}")

        step("attempts: list by endpoint, and its filters")
        for m in (self.m1, self.m2, self.m3, self.m4, self.m5):
            wait_for(f"a successful attempt of {m.id} to {ep.id}", lambda m=m: [a for a in self.attempts_by_msg(a1.id, m.id, endpoint_id=ep.id) if a.status == MessageStatus.SUCCESS])
        by_ep = self.attempts_by_endpoint(a1.id, ep.id)
        got = {a.msg_id for a in by_ep}
        check_eq(got, {self.m1.id, self.m2.id, self.m3.id, self.m4.id, self.m5.id}, "messages of the attempts listed by endpoint")
        for a in by_ep:
            check_eq((a.endpoint_id, a.url, a.response_status_code, int(a.status)), (ep.id, self.rx.url("main"), 200, 0), f"attempt {a.id}")
        def msgs(**opts):
            return {a.msg_id for a in self.attempts_by_endpoint(a1.id, ep.id, **opts)}
        check_eq(msgs(status=MessageStatus.SUCCESS), got, "status=0 filter")
        check_eq(msgs(status=MessageStatus.FAIL), set(), "status=2 filter")
        check_eq(msgs(status_code_class=StatusCodeClass.CODE2XX), got, "status_code_class=200 filter")
        check_eq(msgs(status_code_class=StatusCodeClass.CODE5XX), set(), "status_code_class=500 filter")
        check_eq(msgs(event_types=[REFUNDED]), {self.m2.id, self.m4.id}, "event_types filter on attempts")
        check_eq(msgs(channel="ch-a"), {self.m1.id, self.m5.id}, "channel filter on attempts")
        check_eq(msgs(tag="t-one"), {self.m1.id, self.m3.id}, "tag filter on attempts")
        with_msg = self.attempts_by_endpoint(a1.id, ep.id, with_msg=True)
        for a in with_msg:
            check(a.msg is not None, f"attempt {a.id} listed with_msg=true has no msg")
            check_eq(a.msg.id, a.msg_id, f"msg of attempt {a.id}")
            check_eq(a.msg.event_type, self.sent[a.msg_id]["type"], f"msg eventType of attempt {a.id}")

        step("attempts: resend makes a manual attempt with the same svix-id")
        first = self.rx.got("main", m2.id)
        check_eq(len(first), 1, f"requests of {m2.id} at /main before the resend")
        svx.message_attempt.resend(a1.id, m2.id, ep.id)
        def manual():
            atts = self.attempts_by_msg(a1.id, m2.id, endpoint_id=ep.id)
            return ([a for a in atts if a.trigger_type == MessageAttemptTriggerType.MANUAL and a.status == MessageStatus.SUCCESS],
                    f"{[(int(a.trigger_type), int(a.status)) for a in atts]}")
        man = wait_for(f"a manual attempt of {m2.id}", manual)
        check_eq(len(man), 1, "manual attempts after one resend")
        check_eq(len(self.attempts_by_msg(a1.id, m2.id, endpoint_id=ep.id)), 2, f"attempts of {m2.id} to {ep.id} after a resend")
        reqs = self.delivered(m2, "main", count=2)
        check_eq(reqs[1]["headers"]["svix-id"], reqs[0]["headers"]["svix-id"], "svix-id of the resent request")
        check_eq(reqs[0]["headers"]["svix-id"], m2.id, "svix-id is the message id")

    def secrets_and_headers(self):
        svx, a1, ep = self.svx, self.a1, self.ep_main
        step("headers: set (PUT), read back")
        svx.endpoint.set_headers(a1.id, ep.id, EndpointHeadersIn(headers={"X-Drive-One": "1", "X-Drive-Two": "2"}))
        h = svx.endpoint.get_headers(a1.id, ep.id)
        check(isinstance(h.sensitive, list), "headers.sensitive is not a list")
        check_eq({k.lower(): v for k, v in h.headers.items()}, {"x-drive-one": "1", "x-drive-two": "2"}, "headers after PUT")

        step("headers: PATCH with deleteHeaders, read back, delivered")
        svx.endpoint.patch_headers(a1.id, ep.id, EndpointHeadersPatchIn(headers={"X-Drive-One": "uno"}, delete_headers=["X-Drive-Two"]))
        h = svx.endpoint.get_headers(a1.id, ep.id)
        check_eq({k.lower(): v for k, v in h.headers.items()}, {"x-drive-one": "uno"}, "headers after PATCH")
        check(isinstance(h.sensitive, list), "headers.sensitive is not a list")
        m = self.send(a1.id, CREATED, ["main"])
        r = self.delivered(m, "main")[0]["headers"]
        check_eq(r.get("x-drive-one"), "uno", "patched custom header on the delivery")
        check("x-drive-two" not in r, "a deleted custom header was still sent")

        step("secrets: rotate with a given key (default grace): both secrets sign")
        s2 = harness.new_secret(48)
        out = svx.endpoint.rotate_secret(a1.id, ep.id, EndpointSecretRotateIn(key=s2))
        check_eq(out.key, s2, "key answered by rotate")
        self.rx.add_secret("main", s2)
        check_eq(svx.endpoint.get_secret(a1.id, ep.id).key, s2, "get_secret after rotate")
        m = self.send(a1.id, CREATED, ["main"])
        req = self.delivered(m, "main")[0]
        check_eq(harness.verifies_with(req, s2), (True, True), "the new secret verifies a delivery after rotation (svix, standardwebhooks)")
        check_eq(harness.verifies_with(req, self.s_main), (True, True), "the old secret still verifies during the grace period")

        step("secrets: rotate without a key, gracePeriodSeconds=0: only the new secret signs")
        out = svx.endpoint.rotate_secret(a1.id, ep.id, EndpointSecretRotateIn(grace_period_seconds=0))
        s3 = out.key
        check(s3.startswith("whsec_") and s3 != s2, f"generated key {s3[:10]}...")
        n = len(harness.secret_bytes(s3))
        check(24 <= n <= 64, f"generated secret decodes to {n} bytes")
        self.rx.add_secret("main", s3)
        check_eq(svx.endpoint.get_secret(a1.id, ep.id).key, s3, "get_secret after the second rotation")
        m = self.send(a1.id, REFUNDED, ["main", "refunded"])
        req = self.delivered(m, "main")[0]
        check_eq(harness.verifies_with(req, s3), (True, True), "the generated secret verifies a delivery")
        check_eq(harness.verifies_with(req, s2), (False, False), "the secret expired by gracePeriodSeconds=0 still verifies")
        self.delivered(m, "refunded")

        step("secrets: gracePeriodSeconds out of range answers 422")
        err("rotate with gracePeriodSeconds=604801", lambda: svx.endpoint.rotate_secret(a1.id, ep.id, EndpointSecretRotateIn(grace_period_seconds=604801)), 422)
        check_eq(svx.endpoint.get_secret(a1.id, ep.id).key, s3, "a refused rotation must not change the secret")

    def disable(self):
        svx, a1, ref = self.svx, self.a1, self.ep_ref
        step("disable: PATCH disabled=true; a message is not delivered to it")
        p = svx.endpoint.patch(a1.id, ref.id, EndpointPatch(disabled=True))
        check_eq(p.disabled, True, "disabled after PATCH")
        check_eq(svx.endpoint.get(a1.id, ref.id).disabled, True, "disabled read back")
        m = self.send(a1.id, REFUNDED, ["main"])
        self.delivered(m, "main")
        def canceled():
            atts = [a for a in self.attempts_by_msg(a1.id, m.id) if a.endpoint_id == ref.id]
            return atts, f"attempts {[(a.endpoint_id, int(a.status), a.status_text.value) for a in self.attempts_by_msg(a1.id, m.id)]}"
        atts = wait_for(f"the not-sent attempt of {m.id} to the disabled endpoint (docs/svix.md: status 4)", canceled)
        for a in atts:
            check_eq(int(a.status), int(MessageStatus.CANCELED), "status of an attempt to a disabled endpoint")
            check_eq(a.status_text.value, "canceled", "statusText of an attempt to a disabled endpoint")
        check_eq(self.rx.got("refunded", m.id), [], "a disabled endpoint got a request")

        step("disable: PUT disabled=false; delivered again")
        u = svx.endpoint.upsert(a1.id, ref.id, EndpointUpsertIn(url=self.rx.url("refunded"), event_types=[REFUNDED], disabled=False))
        check(not u.disabled, "disabled after PUT disabled=false")
        m = self.send(a1.id, REFUNDED, ["main", "refunded"])
        self.delivered(m, "refunded")
        self.delivered(m, "main")

    def event_types(self):
        svx = self.svx
        step("event types: list, get")
        names = [e.name for e in collect(lambda limit, it: svx.event_type.list(EventTypeListOptions(limit=limit, iterator=it)), "event types")]
        check(CREATED in names, f"{CREATED} missing from the event types: {names}")
        check(REFUNDED in names, f"{REFUNDED} missing from the event types: {names}")
        et = svx.event_type.get(CREATED)
        check_eq(et.name, CREATED, "event type name")
        check(isinstance(et.deprecated, bool), "event type deprecated is not a bool")
        check_eq(et.archived, False, "event type archived")
        if et.schemas:
            check_eq(sorted(et.schemas), ["1"], "event type schemas keys")
        full = svx.event_type.list(EventTypeListOptions(limit=250, with_content=True)).data
        check(any(e.name == CREATED for e in full), "event types listed with_content=true")
        err("GET an event type not in the catalog", lambda: svx.event_type.get(f"drv.{self.run}.none"), 404)

        step("event types: create answers 409 for a catalog type, 422 for another")
        err("create of a catalog type", lambda: svx.event_type.create(EventTypeIn(name=CREATED, description="again")), 409)
        e = err("create of a new type", lambda: svx.event_type.create(EventTypeIn(name=f"drv.{self.run}.new", description="new")), 422)
        check(e.detail and e.detail[0].type == "catalog_in_config", f"422 detail[0].type: {[(d.loc, d.type) for d in (e.detail or [])]}")

    def portal(self):
        svx, a1, a2 = self.svx, self.a1, self.a2
        step("portal: app_portal_access answers url and token; the url serves the portal page")
        acc = svx.authentication.app_portal_access(a1.id, AppPortalAccessIn())
        check(acc.token and acc.url, "app portal access without url or token")
        check(acc.token in acc.url, f"the portal url {acc.url!r} does not carry the token")
        status, headers, body = raw("", "GET", acc.url)
        check_eq(status, 200, f"GET {acc.url.split('#')[0]}")
        check("text/html" in headers.get("content-type", ""), f"portal page content-type {headers.get('content-type')!r}")
        check(b"<html" in body.lower() or b"<!doctype html" in body.lower(), "portal page is not HTML")

        step("portal: expiry outside 3600..max_session_ttl answers 422")
        err("app portal access expiry=60", lambda: svx.authentication.app_portal_access(a1.id, AppPortalAccessIn(expiry=60)), 422)
        err("app portal access expiry=10000000", lambda: svx.authentication.app_portal_access(a1.id, AppPortalAccessIn(expiry=10_000_000)), 422)

        step("portal: its token reads its own application")
        p = self.client(acc.token)
        ids = {e.id for e in p.endpoint.list(a1.id, EndpointListOptions(limit=250)).data}
        check({self.ep_main.id, self.ep_cha.id, self.ep_ref.id} <= ids, f"portal endpoint list: {ids}")
        check_eq(p.endpoint.get(a1.id, self.ep_main.id).id, self.ep_main.id, "portal GET endpoint")
        mids, _ = self.msg_ids(a1.id, "portal messages", svx=p, limit=250)
        check(self.m1.id in mids, "portal message list lacks a message of its application")
        check(any(a.msg_id == self.m1.id for a in p.message_attempt.list_by_msg(a1.id, self.m1.id).data), "portal attempts of a message")

        step("portal: not another application, not the secret, not a message")
        err("portal token: endpoints of another application", lambda: p.endpoint.list(a2.id), (403, 404))
        err("portal token: an endpoint of another application", lambda: p.endpoint.get(a2.id, self.ep_other.id), (403, 404))
        err("portal token: messages of another application", lambda: p.message.list(a2.id), (403, 404))
        err("portal token: get_secret", lambda: p.endpoint.get_secret(a1.id, self.ep_main.id), 403)
        before, _ = self.msg_ids(a1.id, "messages", limit=250)
        err("portal token: create a message", lambda: p.message.create(a1.id, MessageIn(event_type=CREATED, payload={"portal": True})), 403)
        err("portal token: list applications", lambda: p.application.list(), (401, 403, 404))
        after, _ = self.msg_ids(a1.id, "messages", limit=250)
        check_eq(sorted(after), sorted(before), "messages after the portal's refused message")

        step("portal: a read-only session reads but cannot change")
        ro = self.client(svx.authentication.app_portal_access(a1.id, AppPortalAccessIn(read_only=True, expiry=3600)).token)
        check(ro.endpoint.list(a1.id).data, "read-only portal endpoint list is empty")
        err("read-only portal token: PATCH endpoint", lambda: ro.endpoint.patch(a1.id, self.ep_main.id, EndpointPatch(description="ro")), 403)
        check_eq(svx.endpoint.get(a1.id, self.ep_main.id).description, "put", "description after a refused read-only PATCH")

    def ingest(self):
        a1 = self.a1
        step("ingest token: creates a message; cannot list applications or create an endpoint")
        ing = self.client(self.ingest_token)
        m = self.send(a1.id, CREATED, ["main"], svx=ing, options=MessageCreateOptions())
        self.delivered(m, "main")
        err("ingest token: list applications", lambda: ing.application.list(), 403)
        err("ingest token: create an endpoint", lambda: ing.endpoint.create(a1.id, EndpointIn(url=self.rx.url("ingest"))), 403)
        check(len(self.svx.endpoint.list(a1.id, EndpointListOptions(limit=250)).data) == 3, "an endpoint appeared after the ingest token's refused create")

    def wrong_paths(self):
        svx, a1, a2 = self.svx, self.a1, self.a2
        step("another application's endpoint under the wrong application path answers 404")
        err("GET endpoint of app 2 under app 1", lambda: svx.endpoint.get(a1.id, self.ep_other.id), 404)
        err("get_secret of app 2's endpoint under app 1", lambda: svx.endpoint.get_secret(a1.id, self.ep_other.id), 404)
        err("PATCH endpoint of app 2 under app 1", lambda: svx.endpoint.patch(a1.id, self.ep_other.id, EndpointPatch(description="x")), 404)
        err("attempts of app 1's message under app 2", lambda: svx.message_attempt.list_by_msg(a2.id, self.m1.id), 404)
        err("GET an application that does not exist", lambda: svx.application.get(self.uid("nobody")), 404)

        step("unauthenticated and wrong tokens answer 401 with a JSON body")
        for tok in (None, "drv-wrong-token-0123456789"):
            res = self.raw("GET", "/api/v1/app", token=tok)
            check_eq(res[0], 401, f"GET /api/v1/app with token {tok!r}")
            body = raw_json("401 answer", res)
            check(isinstance(body.get("code"), str) and isinstance(body.get("detail"), str), f"401 body {body!r} lacks code/detail strings")

        step("paths with a trailing / work")
        res = self.raw("GET", "/api/v1/app/")
        check_eq(res[0], 200, "GET /api/v1/app/")
        check(isinstance(raw_json("GET /api/v1/app/", res).get("data"), list), "GET /api/v1/app/ has no data list")
        res = self.raw("GET", f"/api/v1/app/{a1.id}/")
        check_eq(res[0], 200, f"GET /api/v1/app/{a1.id}/")
        check_eq(raw_json("GET app/", res).get("id"), a1.id, f"GET /api/v1/app/{a1.id}/ id")
        res = self.raw("GET", f"/api/v1/app/{a1.id}/endpoint/{self.ep_main.id}/")
        check_eq(res[0], 200, "GET endpoint with a trailing /")

    def malformed(self):
        svx, a1 = self.svx, self.a1
        step("malformed bodies answer 422 {detail: [{loc, msg, type}]} and create nothing")
        eps_before = sorted(e.id for e in svx.endpoint.list(a1.id, EndpointListOptions(limit=250)).data)
        msgs_before, _ = self.msg_ids(a1.id, "messages", limit=250)
        cases = [
            ("POST", f"/api/v1/app/{a1.id}/endpoint", json.dumps({"url": 5}).encode(), "endpoint with url 5"),
            ("POST", f"/api/v1/app/{a1.id}/endpoint", b"{not json", "endpoint, body not JSON"),
            ("POST", f"/api/v1/app/{a1.id}/endpoint", json.dumps({}).encode(), "endpoint without url"),
            ("POST", f"/api/v1/app/{a1.id}/msg", json.dumps({"eventType": 5, "payload": {}}).encode(), "message with eventType 5"),
            ("POST", f"/api/v1/app/{a1.id}/msg", json.dumps({"eventType": CREATED, "payload": [1]}).encode(), "message with an array payload"),
            ("POST", f"/api/v1/app/{a1.id}/msg", b"", "message, empty body"),
            ("PATCH", f"/api/v1/app/{a1.id}/endpoint/{self.ep_main.id}", json.dumps({"disabled": "yes"}).encode(), "PATCH endpoint disabled \"yes\""),
        ]
        for method, path, body, what in cases:
            res = self.raw(method, path, body=body)
            check_eq(res[0], 422, what)
            b = raw_json(what, res)
            d = b.get("detail")
            check(isinstance(d, list) and d, f"{what}: 422 body {b!r} has no detail list")
            for item in d:
                check(isinstance(item, dict) and isinstance(item.get("loc"), list) and isinstance(item.get("msg"), str) and isinstance(item.get("type"), str),
                      f"{what}: detail item {item!r} is not {{loc: [...], msg, type}}")
        e = err("endpoint with an url that is not one (library)", lambda: svx.endpoint.create(a1.id, EndpointIn(url="not a url")), 422)
        check(isinstance(e, HTTPValidationError) and e.detail, "the library's HTTPValidationError has no detail")
        check_eq(sorted(e.id for e in svx.endpoint.list(a1.id, EndpointListOptions(limit=250)).data), eps_before, "endpoints after malformed requests")
        check_eq(svx.endpoint.get(a1.id, self.ep_main.id).disabled in (None, False), True, "endpoint after a malformed PATCH")
        msgs_after, _ = self.msg_ids(a1.id, "messages", limit=250)
        check_eq(sorted(msgs_after), sorted(msgs_before), "messages after malformed requests")

    def unlisted(self):
        svx, a1 = self.svx, self.a1
        step("unlisted Svix routes answer 404 code not_supported")
        for method, path in (("GET", "/api/v1/stats/usage/app"), ("POST", "/api/v1/stats/usage/app"),
                             ("GET", "/api/v1/transformation-template"), ("GET", f"/api/v1/app/{a1.id}/integration"),
                             ("GET", "/api/v1/background-task"), ("GET", "/api/v1/operational-webhook/endpoint")):
            res = self.raw(method, path, body={} if method == "POST" else None)
            check_eq(res[0], 404, f"{method} {path}")
            check_eq(raw_json(f"{method} {path}", res).get("code"), "not_supported", f"{method} {path} code")
        now = datetime.now(timezone.utc)
        err("statistics.aggregate_app_stats", lambda: svx.statistics.aggregate_app_stats(AppUsageStatsIn(since=now - timedelta(days=1), until=now)), 404, code="not_supported")
        err("background_task.list", lambda: svx.background_task.list(), 404, code="not_supported")
        err("integration.list", lambda: svx.integration.list(a1.id), 404, code="not_supported")

        step("every non-2xx answer has a JSON body (405 and 404 included)")
        for method, path in (("DELETE", "/api/v1/health"), ("GET", "/api/v1/no-such-thing")):
            res = self.raw(method, path)
            check(res[0] >= 400, f"{method} {path} answered {res[0]}")
            raw_json(f"{method} {path}", res)

    def final_deliveries(self):
        a1, a2 = self.a1, self.a2
        step("deliveries: after a last message to every endpoint, each got exactly its messages")
        # Channels ch-a and type order.refunded: every endpoint of app 1 takes it.
        last = self.send(a1.id, REFUNDED, ["main", "cha", "refunded"], channels=["ch-a"])
        other = self.send(a2.id, CREATED, ["other"])
        for path in ("main", "cha", "refunded"):
            self.delivered(last, path)
        self.delivered(other, "other")
        for path, want in sorted(self.expect.items()):
            # every message expected at the path has arrived (waited for above or here)
            for msg_id in sorted(want):
                self.rx.wait("expected delivery", path, msg_id)
        for path in ("main", "cha", "refunded", "other", "put", "ingest"):
            got = self.rx.ids(path)
            want = self.expect.get(path, set())
            extra = got - want
            check(not extra, f"/{path} got messages it must not: " + ", ".join(
                f"{i} ({self.sent[i]['type']}, channels {sorted(self.sent[i]['channels'])})" if i in self.sent else str(i) for i in sorted(extra, key=str)))
            check_eq(got, want, f"messages received at /{path}")


if __name__ == "__main__":
    harness.run(LABEL, lambda: Walk().main())
