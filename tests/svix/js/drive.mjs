// Drives herald's Svix-compatible API (docs/svix.md) with the official JavaScript library, svix 2.x.
//
//     cd tests/svix/js && npm ci
//     HERALD_URL=http://127.0.0.1:PORT HERALD_ADMIN_TOKEN=... HERALD_INGEST_TOKEN=... node drive.mjs
//
// The same walk as tests/svix/drive.py (its docstring says what herald needs). The JavaScript
// library does not validate answers (it maps fields and turns timestamps into Dates), so the walk
// checks every required field of each answer itself, with the types of the library's models.
// Every request the receiver gets is verified with svix's `Webhook` (svix-* headers only) and
// with `standardwebhooks`' `Webhook` (webhook-* headers only). The last line is
// `svix-js: all checks passed`.

import { randomBytes } from "node:crypto";
import http from "node:http";
import { Webhook as StdWebhook } from "standardwebhooks";
import {
  ApiException,
  MessageAttemptTriggerType,
  MessageStatus,
  Ordering,
  StatusCodeClass,
  Svix,
  Webhook,
} from "svix";

const LABEL = "svix-js";
const CREATED = "order.created";
const REFUNDED = "order.refunded";
const DEADLINE_MS = 20_000;
const POLL_MS = 100;

// -- checks ----------------------------------------------------------------------------------

class CheckFailed extends Error {}
let currentStep = "(start)";

function step(name) {
  currentStep = name;
  console.log(`-- ${name}`);
}
function fail(msg) {
  throw new CheckFailed(msg);
}
function check(cond, msg) {
  if (!cond) fail(msg);
}
const show = (v) => JSON.stringify(v, (_k, x) => (x instanceof Set ? [...x].sort() : x));
function checkEq(got, want, what) {
  if (show(got) !== show(want)) fail(`${what}: got ${show(got)}, want ${show(want)}`);
}
const sorted = (xs) => [...(xs ?? [])].sort();
const setEq = (got, want, what) => checkEq(sorted(got), sorted(want), what);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function env(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`FAIL: set ${name}`);
    process.exit(2);
  }
  return v;
}

async function waitFor(what, fn, timeoutMs = DEADLINE_MS) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    const out = await fn();
    let value = out;
    if (Array.isArray(out) && out.length === 2 && typeof out[1] === "string") [value, last] = out;
    if (Array.isArray(value) ? value.length > 0 : value) return value;
    if (Date.now() >= deadline) fail(`timed out after ${timeoutMs / 1000} s waiting for ${what}${last ? `; last: ${last}` : ""}`);
    await sleep(POLL_MS);
  }
}

/** fn() must throw the library's ApiException with a status in `statuses` (and `code`). */
async function expectError(what, fn, statuses, code) {
  statuses = [].concat(statuses);
  let out;
  try {
    out = await fn();
  } catch (e) {
    if (!(e instanceof ApiException)) throw e;
    check(statuses.includes(e.code), `${what}: HTTP ${e.code} ${show(e.body)}, want ${statuses.join(" or ")}`);
    check(e.body && typeof e.body === "object", `${what}: HTTP ${e.code} without a JSON object body`);
    if (code !== undefined) checkEq(e.body.code, code, `${what}: error code`);
    return e;
  }
  fail(`${what}: want HTTP ${statuses.join(" or ")}, but the call succeeded (${show(out)?.slice(0, 200)})`);
}

// -- shapes: the required fields of the library's models ------------------------------------

const isStr = (v) => typeof v === "string";
const isInt = (v) => Number.isInteger(v);
const isDate = (v) => v instanceof Date && !Number.isNaN(v.getTime());
const isStrMap = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && Object.values(v).every(isStr);
const optStrList = (v) => v === undefined || v === null || (Array.isArray(v) && v.every(isStr));

function shape(what, obj, fields) {
  check(obj !== null && typeof obj === "object", `${what}: not an object: ${show(obj)}`);
  for (const [name, test] of Object.entries(fields)) {
    check(test(obj[name]), `${what}: field ${name} missing or of the wrong type: ${show(obj[name])}`);
  }
  return obj;
}
const appShape = (a) =>
  shape(`application ${a?.id}`, a, { id: isStr, name: isStr, metadata: isStrMap, createdAt: isDate, updatedAt: isDate });
const epShape = (e) =>
  shape(`endpoint ${e?.id}`, e, {
    id: isStr, url: isStr, description: isStr, metadata: isStrMap, createdAt: isDate, updatedAt: isDate,
    eventTypes: optStrList, channels: optStrList,
  });
const msgShape = (m) =>
  shape(`message ${m?.id}`, m, {
    id: isStr, eventType: isStr, timestamp: isDate, channels: optStrList, tags: optStrList,
    payload: (p) => p !== null && typeof p === "object" && !Array.isArray(p),
  });
const STATUS_TEXT = ["success", "pending", "fail", "sending", "canceled"];
const attShape = (a) =>
  shape(`attempt ${a?.id}`, a, {
    id: isStr, msgId: isStr, endpointId: isStr, url: isStr, response: isStr, responseStatusCode: isInt,
    responseDurationMs: isInt, status: (s) => [0, 1, 2, 3, 4].includes(s), statusText: (s) => STATUS_TEXT.includes(s),
    triggerType: (t) => t === 0 || t === 1, timestamp: isDate,
  });
const etShape = (e) =>
  shape(`event type ${e?.name}`, e, {
    name: isStr, description: isStr, deprecated: (d) => typeof d === "boolean", createdAt: isDate, updatedAt: isDate,
  });

/** Pages through a list, `limit` a page, following `iterator` until `done`. */
async function collect(fetch, what, limit = 1, maxPages = 5000, itemShape = (x) => x) {
  const items = [];
  const seen = new Set();
  let iterator = null;
  for (let i = 0; i < maxPages; i++) {
    const page = await fetch(limit, iterator);
    check(Array.isArray(page.data), `${what}: data is not a list`);
    check(typeof page.done === "boolean", `${what}: done is not a boolean`);
    check(page.data.length <= limit, `${what}: ${page.data.length} items on a page of limit=${limit}`);
    page.data.forEach(itemShape);
    items.push(...page.data);
    if (page.done) {
      check(page.iterator === null, `${what}: done=true but iterator=${show(page.iterator)} (docs/svix.md: present, null when done)`);
      return items;
    }
    check(isStr(page.iterator) && page.iterator, `${what}: done=false but no iterator`);
    check(!seen.has(page.iterator), `${what}: iterator ${page.iterator} came back twice`);
    seen.add(page.iterator);
    iterator = page.iterator;
  }
  fail(`${what}: still not done after ${maxPages} pages`);
}

// -- secrets and verification ----------------------------------------------------------------

function newSecret(nbytes = 32, prefix = true) {
  const b64 = randomBytes(nbytes).toString("base64");
  return prefix ? `whsec_${b64}` : b64;
}
const secretBytes = (s) => Buffer.from(s.replace(/^whsec_/, ""), "base64").length;
const pick = (headers, names) => Object.fromEntries(names.filter((n) => headers[n] !== undefined).map((n) => [n, headers[n]]));
const SVIX_HEADERS = ["svix-id", "svix-timestamp", "svix-signature"];
const WEBHOOK_HEADERS = ["webhook-id", "webhook-timestamp", "webhook-signature"];

/** [svix ok, standardwebhooks ok] for one recorded request and one secret. */
function verifiesWith(req, secret) {
  const out = [];
  for (const verify of [
    () => new Webhook(secret).verify(req.body, pick(req.headers, SVIX_HEADERS)),
    () => new StdWebhook(secret).verify(req.body, pick(req.headers, WEBHOOK_HEADERS)),
  ]) {
    try {
      verify();
      out.push(true);
    } catch {
      out.push(false);
    }
  }
  return out;
}

class Receiver {
  constructor() {
    this.requests = [];
    this.secrets = new Map();
    this.unverified = [];
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        const rec = { path: req.url.replace(/^\//, "").split("?")[0], headers: req.headers, body: Buffer.concat(chunks) };
        this.requests.push(rec);
        if (this.why(rec) !== null) this.unverified.push(rec);
        res.writeHead(200, { "content-type": "text/plain" }).end("ok");
      });
    });
  }
  async start() {
    await new Promise((r) => this.server.listen(0, "127.0.0.1", r));
    this.port = this.server.address().port;
  }
  url(path) {
    return `http://127.0.0.1:${this.port}/${path}`;
  }
  addSecret(path, secret) {
    if (!this.secrets.has(path)) this.secrets.set(path, []);
    this.secrets.get(path).push(secret);
  }
  why(rec) {
    const secrets = this.secrets.get(rec.path) ?? [];
    if (!secrets.length) return "no secret registered for this path";
    const results = secrets.map((s) => verifiesWith(rec, s));
    const why = [];
    if (!results.some((r) => r[0])) why.push("svix Webhook on the svix-* headers refused it");
    if (!results.some((r) => r[1])) why.push("standardwebhooks Webhook on the webhook-* headers refused it");
    return why.length ? why.join("; ") : null;
  }
  finishVerification() {
    return this.unverified
      .map((r) => [r, this.why(r)])
      .filter(([, why]) => why !== null)
      .map(([r, why]) => `/${r.path} svix-id=${r.headers["svix-id"]} webhook-id=${r.headers["webhook-id"]}: ${why}`);
  }
  got(path, msgId) {
    return this.requests.filter((r) => r.path === path && (msgId === undefined || r.headers["svix-id"] === msgId));
  }
  ids(path) {
    return new Set(this.got(path).map((r) => r.headers["svix-id"]));
  }
  describe(path) {
    const reqs = this.got(path);
    return `/${path} got ${reqs.length} request(s), svix-id/webhook-id: ${reqs.map((r) => `${r.headers["svix-id"]}/${r.headers["webhook-id"]}`).join(", ")}`;
  }
  async wait(what, path, msgId, count = 1) {
    await waitFor(`${what}: ${count} request(s) with svix-id ${msgId} at /${path}`, () => [
      this.got(path, msgId).length >= count,
      `${this.got(path, msgId).length} so far; ${this.describe(path)}`,
    ]);
    return this.got(path, msgId);
  }
  close() {
    this.server.closeAllConnections?.();
    this.server.close();
  }
}

// -- the walk ----------------------------------------------------------------------------------

class Walk {
  constructor() {
    this.base = env("HERALD_URL").replace(/\/+$/, "");
    this.adminToken = env("HERALD_ADMIN_TOKEN");
    this.ingestToken = env("HERALD_INGEST_TOKEN");
    this.svx = this.client(this.adminToken);
    this.run = randomBytes(4).toString("hex");
    this.rx = new Receiver();
    this.sent = new Map();
    this.expect = new Map();
  }

  client(token) {
    // No retries: a 5xx must show up as a failure.
    return new Svix(token, { serverUrl: this.base, retryScheduleInMs: [] });
  }
  uid(name) {
    return `drvjs-${this.run}-${name}`;
  }

  async raw(method, path, { token = this.adminToken, body, contentType = "application/json" } = {}) {
    const headers = {};
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined && contentType) headers["content-type"] = contentType;
    const res = await fetch(path.startsWith("http") ? path : this.base + path, { method, headers, body });
    const text = Buffer.from(await res.arrayBuffer());
    return { status: res.status, headers: res.headers, body: text };
  }
  rawJson(what, res) {
    let out;
    try {
      out = JSON.parse(res.body.toString());
    } catch {
      fail(`${what}: HTTP ${res.status} with a body that is not JSON: ${show(res.body.toString().slice(0, 200))}`);
    }
    check(out !== null && typeof out === "object" && !Array.isArray(out), `${what}: HTTP ${res.status} with a JSON body that is not an object`);
    return out;
  }

  async send(appId, eventType, to, { payload, channels, tags, eventId, svx, options = { withContent: true }, ...extra } = {}) {
    payload = payload ?? { n: this.sent.size + 1, run: this.run, nested: { ok: true } };
    const msgIn = { eventType, payload, ...extra };
    if (channels !== undefined) msgIn.channels = channels;
    if (tags !== undefined) msgIn.tags = tags;
    if (eventId !== undefined) msgIn.eventId = eventId;
    const msg = msgShape(await (svx ?? this.svx).message.create(appId, msgIn, options));
    checkEq(msg.eventType, eventType, `message ${msg.id} eventType`);
    checkEq(msg.payload, options.withContent ? payload : {}, `message ${msg.id} payload (with_content=${!!options.withContent})`);
    if (channels !== undefined) setEq(msg.channels, channels, `message ${msg.id} channels`);
    if (tags !== undefined) setEq(msg.tags, tags, `message ${msg.id} tags`);
    if (eventId !== undefined) checkEq(msg.eventId, eventId, `message ${msg.id} eventId`);
    if (!this.sent.has(msg.id)) {
      this.sent.set(msg.id, { app: appId, type: eventType, payload, channels: channels ?? [] });
      for (const path of to) {
        if (!this.expect.has(path)) this.expect.set(path, new Set());
        this.expect.get(path).add(msg.id);
      }
    }
    return msg;
  }

  async delivered(msg, path, count = 1) {
    const reqs = await this.rx.wait(`delivery of ${msg.id}`, path, msg.id, count);
    for (const r of reqs) {
      for (const [a, b] of [["svix-id", "webhook-id"], ["svix-timestamp", "webhook-timestamp"], ["svix-signature", "webhook-signature"]]) {
        check(r.headers[a], `/${path} request for ${msg.id} has no ${a} header`);
        checkEq(r.headers[a], r.headers[b], `/${path} request for ${msg.id}: ${a} vs ${b}`);
      }
      let body;
      try {
        body = JSON.parse(r.body.toString());
      } catch {
        fail(`/${path} request for ${msg.id}: body is not JSON`);
      }
      checkEq(body, this.sent.get(msg.id).payload, `/${path} request body for ${msg.id}`);
    }
    return reqs;
  }

  async msgs(appId, what, opts = {}, svx = this.svx, limit = 2) {
    return collect((l, it) => svx.message.list(appId, { ...opts, limit: l, iterator: it }), what, limit, 5000, msgShape);
  }
  async msgIds(appId, what, opts = {}, svx = this.svx) {
    return (await this.msgs(appId, what, opts, svx, 250)).map((m) => m.id);
  }
  async attemptsByMsg(appId, msgId, opts = {}) {
    return collect((l, it) => this.svx.messageAttempt.listByMsg(appId, msgId, { ...opts, limit: l, iterator: it }), `attempts of ${msgId}`, 50, 5000, attShape);
  }
  async attemptsByEndpoint(appId, epId, opts = {}) {
    return collect((l, it) => this.svx.messageAttempt.listByEndpoint(appId, epId, { ...opts, limit: l, iterator: it }), `attempts of ${epId}`, 50, 5000, attShape);
  }
  async epIds(appId) {
    return (await this.svx.endpoint.list(appId, { limit: 250 })).data.map((e) => epShape(e).id);
  }

  async main() {
    await this.rx.start();
    console.log(`receiver on 127.0.0.1:${this.rx.port}, run ${this.run}`);
    await this.health();
    await this.applications();
    await this.endpoints();
    await this.messages();
    await this.attempts();
    await this.secretsAndHeaders();
    await this.disable();
    await this.eventTypes();
    await this.portal();
    await this.ingest();
    await this.wrongPaths();
    await this.malformed();
    await this.unlisted();
    await this.finalDeliveries();
    step("receiver: every request verified with both libraries");
    const failures = this.rx.finishVerification();
    check(!failures.length, `${failures.length} request(s) failed verification:\n  ${failures.join("\n  ")}`);
    check(this.rx.requests.length, "the receiver got no request at all");
    this.rx.close();
    console.log(`${this.rx.requests.length} deliveries verified`);
    console.log(`${LABEL}: all checks passed`);
  }

  async health() {
    step("health: GET /api/v1/health (library, raw, trailing /)");
    await this.svx.health.get();
    for (const path of ["/api/v1/health", "/api/v1/health/"]) checkEq((await this.raw("GET", path)).status, 204, `GET ${path}`);
  }

  async applications() {
    const svx = this.svx;
    const listAll = (limit = 1) => collect((l, it) => svx.application.list({ limit: l, iterator: it }), "application list", limit, 5000, appShape);

    step("applications: create with a uid");
    const u1 = this.uid("main");
    const a1 = appShape(await svx.application.create({ name: "drive main", uid: u1, metadata: { team: "one" } }));
    checkEq(a1.id, u1, "application id (docs/svix.md: the uid when given)");
    checkEq(a1.uid, u1, "application uid");
    checkEq(a1.name, "drive main", "application name");
    checkEq(a1.metadata, { team: "one" }, "application metadata");
    this.a1 = a1;

    step("applications: create without a uid");
    const a2 = appShape(await svx.application.create({ name: "drive other" }));
    check(a2.id.startsWith("app_"), `application id ${a2.id} does not start with app_`);
    check(a2.uid === null || a2.uid === undefined, `application created without uid has uid ${show(a2.uid)}`);
    checkEq(a2.metadata, {}, "metadata of an application created without any");
    this.a2 = a2;

    step("applications: the same uid again without get_if_exists is a conflict");
    await expectError("POST /api/v1/app with an existing uid", () => svx.application.create({ name: "again", uid: u1 }), 409);

    step("applications: getOrCreate (existing, then new)");
    const same = appShape(await svx.application.getOrCreate({ name: "ignored", uid: u1 }));
    checkEq(same.id, a1.id, "getOrCreate of an existing uid");
    checkEq(same.name, "drive main", "getOrCreate must not change the existing application");
    const u3 = this.uid("doomed");
    const a3 = appShape(await svx.application.getOrCreate({ name: "drive doomed", uid: u3 }));
    checkEq(a3.id, u3, "getOrCreate of a new uid");

    step("applications: an idempotency-key repeated gives the same application");
    const key = this.uid("app-key");
    const i1 = await svx.application.create({ name: "drive idem" }, { idempotencyKey: key });
    const i2 = await svx.application.create({ name: "drive idem" }, { idempotencyKey: key });
    checkEq(i2.id, i1.id, "second POST /api/v1/app with the same idempotency-key");

    step("applications: list with limit=1, following iterator until done");
    let seen = (await listAll()).map((a) => a.id);
    for (const a of [a1, a2, a3, i1]) check(seen.includes(a.id), `application ${a.id} missing from the list`);
    checkEq(seen.filter((x) => x === i1.id).length, 1, `times ${i1.id} (made twice with one idempotency-key) is listed`);
    checkEq(seen.length, new Set(seen).size, "applications listed twice across pages");

    step("applications: get by uid and by id");
    checkEq(appShape(await svx.application.get(u1)).id, a1.id, "GET /api/v1/app/{uid}");
    checkEq((await svx.application.get(a2.id)).name, "drive other", "GET /api/v1/app/{id}");

    step("applications: PUT (upsert) and PATCH");
    const up = appShape(await svx.application.upsert(a2.id, { name: "drive other renamed", metadata: { k: "v" } }));
    checkEq([up.id, up.name, up.metadata], [a2.id, "drive other renamed", { k: "v" }], "application after PUT");
    let p = appShape(await svx.application.patch(a1.id, { metadata: { team: "two", x: "y" } }));
    checkEq([p.name, p.metadata], ["drive main", { team: "two", x: "y" }], "application after PATCH of metadata");
    p = appShape(await svx.application.patch(a1.id, { name: "drive main renamed" }));
    checkEq([p.name, p.metadata], ["drive main renamed", { team: "two", x: "y" }], "application after PATCH of the name");

    step("applications: PUT on an absent application creates it with the path as uid");
    const u5 = this.uid("put");
    checkEq(appShape(await svx.application.upsert(u5, { name: "drive put" })).id, u5, "id of the application PUT created");
    checkEq((await svx.application.get(u5)).name, "drive put", "application PUT created, read back");

    step("applications: DELETE, then GET answers 404");
    await svx.application.delete(a3.id);
    await expectError(`GET /api/v1/app/${a3.id} after DELETE`, () => svx.application.get(a3.id), 404);
    seen = (await listAll(50)).map((a) => a.id);
    check(!seen.includes(a3.id), "a deleted application is still listed");

    step("applications: a message naming `application` creates it");
    const u6 = this.uid("auto");
    msgShape(await svx.message.create(u6, { eventType: CREATED, payload: { auto: true }, application: { name: "drive auto", uid: u6 } }));
    checkEq((await svx.application.get(u6)).name, "drive auto", "application created by a message");
  }

  async endpoints() {
    const { svx, a1, a2 } = this;
    step("endpoints: create with secret, uid, metadata, eventTypes, channels, headers");
    const sMain = newSecret(32);
    this.rx.addSecret("main", sMain);
    const epUid = this.uid("ep-main");
    const ep = epShape(await svx.endpoint.create(a1.id, {
      url: this.rx.url("main"), uid: epUid, description: "main endpoint", metadata: { owner: "drive" },
      eventTypes: [CREATED, REFUNDED], secret: sMain, throttleRate: 10, headers: { "X-Drive-Created": "yes" },
    }));
    check(ep.id.startsWith("ep_"), `endpoint id ${ep.id} does not start with ep_`);
    checkEq([ep.url, ep.uid, ep.description, ep.metadata, sorted(ep.eventTypes), ep.throttleRate],
      [this.rx.url("main"), epUid, "main endpoint", { owner: "drive" }, [CREATED, REFUNDED], 10], "endpoint as created");
    check(!ep.disabled, "a new endpoint is disabled");
    this.epMain = ep;
    this.sMain = sMain;

    const chaB64 = newSecret(24, false);
    this.rx.addSecret("cha", `whsec_${chaB64}`);
    const cha = epShape(await svx.endpoint.create(a1.id, { url: this.rx.url("cha"), channels: ["ch-a"], secret: chaB64 }));
    setEq(cha.channels, ["ch-a"], "endpoint channels");
    check(!cha.eventTypes?.length, `endpoint created without eventTypes has ${show(cha.eventTypes)}`);
    checkEq([cha.description, cha.metadata], ["", {}], "description and metadata of an endpoint created without them");
    checkEq((await svx.endpoint.getSecret(a1.id, cha.id)).key, `whsec_${chaB64}`, "an unprefixed secret is stored as whsec_ + the same base64");
    this.epCha = cha;

    step("endpoints: create with an idempotency-key twice, no secret given");
    const key = this.uid("ep-key");
    const refIn = { url: this.rx.url("refunded"), eventTypes: [REFUNDED] };
    const ref1 = epShape(await svx.endpoint.create(a1.id, refIn, { idempotencyKey: key }));
    const ref2 = epShape(await svx.endpoint.create(a1.id, refIn, { idempotencyKey: key }));
    checkEq(ref2.id, ref1.id, "second endpoint POST with the same idempotency-key");
    const sRef = (await svx.endpoint.getSecret(a1.id, ref1.id)).key;
    check(isStr(sRef) && sRef.startsWith("whsec_"), `generated secret ${show(sRef)} lacks whsec_`);
    const n = secretBytes(sRef);
    check(n >= 24 && n <= 64, `generated secret decodes to ${n} bytes`);
    this.rx.addSecret("refunded", sRef);
    this.epRef = ref1;

    step("endpoints: an endpoint in the other application");
    const sOther = newSecret(64);
    this.rx.addSecret("other", sOther);
    this.epOther = epShape(await svx.endpoint.create(a2.id, { url: this.rx.url("other"), secret: sOther }));

    step("endpoints: get by uid and by id; getSecret");
    checkEq(epShape(await svx.endpoint.get(a1.id, epUid)).id, ep.id, "GET endpoint by uid");
    checkEq((await svx.endpoint.get(a1.id, ep.id)).uid, epUid, "GET endpoint by id");
    checkEq((await svx.endpoint.getSecret(a1.id, ep.id)).key, sMain, "getSecret");
    checkEq((await svx.endpoint.getSecret(a1.id, epUid)).key, sMain, "getSecret by uid");

    step("endpoints: list (limit=1 pages; order ascending vs descending)");
    const ids = (await collect((l, it) => svx.endpoint.list(a1.id, { limit: l, iterator: it }), "endpoint list", 1, 5000, epShape)).map((e) => e.id);
    setEq(ids, [ep.id, cha.id, ref1.id], "endpoints of the application");
    const asc = (await svx.endpoint.list(a1.id, { limit: 250, order: Ordering.Ascending })).data.map((e) => e.id);
    const desc = (await svx.endpoint.list(a1.id, { limit: 250, order: Ordering.Descending })).data.map((e) => e.id);
    setEq(asc, ids, "endpoints listed ascending");
    checkEq(desc, [...asc].reverse(), "order=descending must list the endpoints in reverse of order=ascending");

    step("endpoints: PATCH and PUT");
    const p = epShape(await svx.endpoint.patch(a1.id, ep.id, { description: "patched", metadata: { owner: "patch" } }));
    checkEq([p.description, p.metadata, p.uid, sorted(p.eventTypes), p.url],
      ["patched", { owner: "patch" }, epUid, [CREATED, REFUNDED], this.rx.url("main")], "endpoint after PATCH");
    const u = epShape(await svx.endpoint.upsert(a1.id, ep.id, {
      url: this.rx.url("main"), uid: epUid, description: "put", metadata: { owner: "put" }, eventTypes: [CREATED, REFUNDED], throttleRate: 10,
    }));
    checkEq([u.id, u.description, u.metadata], [ep.id, "put", { owner: "put" }], "endpoint after PUT");
    checkEq((await svx.endpoint.getSecret(a1.id, ep.id)).key, sMain, "PUT must keep the secret");

    step("endpoints: PUT on an absent endpoint creates it with the path as uid; DELETE");
    const putUid = this.uid("ep-put");
    const c = epShape(await svx.endpoint.upsert(a2.id, putUid, { url: this.rx.url("put") }));
    checkEq(c.uid, putUid, "uid of the endpoint PUT created");
    checkEq((await svx.endpoint.get(a2.id, putUid)).id, c.id, "endpoint PUT created, read back by uid");
    await svx.endpoint.delete(a2.id, c.id);
    await expectError("GET a deleted endpoint", () => svx.endpoint.get(a2.id, c.id), 404);
  }

  async messages() {
    const { svx, a1, a2 } = this;
    step("messages: create (eventType, payload, eventId, channels, tags)");
    const e1 = this.uid("evt-1");
    const m1 = await this.send(a1.id, CREATED, ["main", "cha"], { channels: ["ch-a"], tags: ["t-one"], eventId: e1 });
    const m2 = await this.send(a1.id, REFUNDED, ["main", "refunded"], { channels: ["ch-b"], tags: ["t-two"], eventId: this.uid("evt-2"), options: {} });
    const m3 = await this.send(a1.id, CREATED, ["main"], { tags: ["t-one", "t-three"], payloadRetentionPeriod: 30 });
    Object.assign(this, { m1, m2, m3 });

    step("messages: a duplicate eventId answers 409 and creates nothing");
    const before = await this.msgIds(a1.id, "messages");
    await expectError("message with an eventId already used", () => svx.message.create(a1.id, { eventType: CREATED, payload: { dup: 1 }, eventId: e1 }), 409, "conflict");
    setEq(await this.msgIds(a1.id, "messages"), before, "messages after the refused duplicate");

    step("messages: deliverAt answers 422");
    await expectError("message with deliverAt", () => svx.message.create(a1.id, { eventType: CREATED, payload: {}, deliverAt: new Date(Date.now() + 300_000) }), 422);

    await sleep(50);
    this.tMid = new Date();
    await sleep(50);
    const early = [m1.id, m2.id, m3.id];

    step("messages: the same idempotency-key twice gives one message");
    const key = this.uid("msg-key");
    const opts = { withContent: true, idempotencyKey: key };
    const m4 = await this.send(a1.id, REFUNDED, ["main", "refunded"], { tags: ["t-two"], options: opts, payload: { idem: this.run } });
    const again = await svx.message.create(a1.id, { eventType: REFUNDED, payload: { idem: this.run }, tags: ["t-two"] }, opts);
    checkEq(again.id, m4.id, "message id for a repeated idempotency-key");
    const ids = await this.msgIds(a1.id, "messages");
    checkEq(ids.filter((x) => x === m4.id).length, 1, "times the idempotent message is listed");
    checkEq(ids.length, before.length + 1, "messages after one idempotent message posted twice");
    const m5 = await this.send(a1.id, CREATED, ["main", "cha"], { channels: ["ch-a", "ch-c"] });
    Object.assign(this, { m4, m5 });
    const mine = [...early, m4.id, m5.id];

    step("messages: list (newest first, pages of 2, with_content)");
    let items = await this.msgs(a1.id, "messages", { withContent: true });
    setEq(items.map((m) => m.id), mine, "messages of the application");
    const stamps = items.map((m) => m.timestamp.getTime());
    check(stamps.every((t, i) => i === 0 || stamps[i - 1] >= t), `messages not newest first: ${show(stamps)}`);
    const order = items.map((m) => m.id);
    check(order.indexOf(m5.id) < order.indexOf(m1.id), "the newest message is not listed before the oldest");
    for (const m of items) checkEq(m.payload, this.sent.get(m.id).payload, `payload of ${m.id} listed with_content=true`);
    items = await this.msgs(a1.id, "messages without content");
    for (const m of items) checkEq(m.payload, {}, `payload of ${m.id} listed with_content=false`);

    step("messages: list filters event_types, channel, tag, before, after");
    const only = async (what, o) => (await this.msgs(a1.id, `messages ${what}`, o)).map((m) => m.id);
    setEq(await only("event_types=order.refunded", { eventTypes: [REFUNDED] }), [m2.id, m4.id], "event_types filter");
    setEq(await only("event_types=both", { eventTypes: [REFUNDED, CREATED] }), mine, "event_types filter with two types");
    setEq(await only("channel=ch-a", { channel: "ch-a" }), [m1.id, m5.id], "channel filter");
    setEq(await only("channel=ch-b", { channel: "ch-b" }), [m2.id], "channel filter");
    setEq(await only("tag=t-one", { tag: "t-one" }), [m1.id, m3.id], "tag filter");
    setEq(await only("tag=t-two", { tag: "t-two" }), [m2.id, m4.id], "tag filter");
    setEq(await only("before", { before: this.tMid }), early, "before filter");
    setEq(await only("after", { after: this.tMid }), [m4.id, m5.id], "after filter");

    step("messages: get by id and by eventId, with and without content");
    let g = msgShape(await svx.message.get(a1.id, m1.id, { withContent: true }));
    checkEq([g.id, g.eventType, g.payload, g.eventId], [m1.id, CREATED, this.sent.get(m1.id).payload, e1], "message by id");
    setEq(g.channels, ["ch-a"], "channels of the message read back");
    setEq(g.tags, ["t-one"], "tags of the message read back");
    g = msgShape(await svx.message.get(a1.id, e1, { withContent: true }));
    checkEq(g.id, m1.id, "message by eventId");
    checkEq(msgShape(await svx.message.get(a1.id, m1.id)).payload, {}, "message read with with_content=false");
    await expectError("a message of one application read under another", () => svx.message.get(a2.id, m1.id), 404);

    step("messages: deliveries reach the endpoints whose types and channels take them");
    await this.delivered(m1, "main");
    await this.delivered(m1, "cha");
    await this.delivered(m2, "refunded");
    for (const m of [m2, m3, m4, m5]) await this.delivered(m, "main");
    await this.delivered(m5, "cha");
    for (const m of [m1, m2, m3, m4, m5]) {
      checkEq(this.rx.got("main", m.id)[0].headers["x-drive-created"], "yes", `custom header given at creation, on ${m.id}`);
    }
  }

  async attempts() {
    const { svx, a1 } = this;
    const ep = this.epMain;
    const { m1, m2 } = this;
    step("attempts: list by message (poll until it exists)");
    const att = (await waitFor(`a successful attempt of ${m1.id} to ${ep.id}`, async () => {
      const atts = (await this.attemptsByMsg(a1.id, m1.id)).filter((a) => a.endpointId === ep.id);
      return [atts.filter((a) => a.status === MessageStatus.Success), show(atts.map((a) => [a.endpointId, a.status]))];
    }))[0];
    checkEq([att.msgId, att.endpointId, att.url, att.responseStatusCode, att.statusText, att.triggerType],
      [m1.id, ep.id, this.rx.url("main"), 200, "success", MessageAttemptTriggerType.Scheduled], "attempt");
    check(att.responseDurationMs >= 0, "attempt responseDurationMs < 0");
    check(att.msg === undefined, "attempt carries msg without with_msg=true");
    const withBody = (await this.attemptsByMsg(a1.id, m1.id, { withContent: true })).filter((a) => a.id === att.id);
    check(withBody.length, "attempt missing when listed with_content=true");
    checkEq(withBody[0].response, "ok", "attempt response (the receiver's body) with_content=true");
    await waitFor(`an attempt of ${m1.id} to the ch-a endpoint`, async () =>
      (await this.attemptsByMsg(a1.id, m1.id)).filter((a) => a.endpointId === this.epCha.id));
    check((await this.attemptsByMsg(a1.id, m1.id)).every((a) => a.endpointId !== this.epRef.id),
      "an attempt of an order.created message to the order.refunded endpoint");
    const only = await this.attemptsByMsg(a1.id, m1.id, { endpointId: ep.id });
    check(only.length && only.every((a) => a.endpointId === ep.id), `endpoint_id filter: ${show(only.map((a) => a.endpointId))}`);

    step("attempts: list by endpoint, and its filters");
    const all = [this.m1, this.m2, this.m3, this.m4, this.m5];
    for (const m of all) {
      await waitFor(`a successful attempt of ${m.id} to ${ep.id}`, async () =>
        (await this.attemptsByMsg(a1.id, m.id, { endpointId: ep.id })).filter((a) => a.status === MessageStatus.Success));
    }
    const byEp = await this.attemptsByEndpoint(a1.id, ep.id);
    const got = [...new Set(byEp.map((a) => a.msgId))];
    setEq(got, all.map((m) => m.id), "messages of the attempts listed by endpoint");
    for (const a of byEp) checkEq([a.endpointId, a.url, a.responseStatusCode, a.status], [ep.id, this.rx.url("main"), 200, 0], `attempt ${a.id}`);
    const msgsOf = async (o) => [...new Set((await this.attemptsByEndpoint(a1.id, ep.id, o)).map((a) => a.msgId))];
    setEq(await msgsOf({ status: MessageStatus.Success }), got, "status=0 filter");
    setEq(await msgsOf({ status: MessageStatus.Fail }), [], "status=2 filter");
    setEq(await msgsOf({ statusCodeClass: StatusCodeClass.Code2xx }), got, "status_code_class=200 filter");
    setEq(await msgsOf({ statusCodeClass: StatusCodeClass.Code5xx }), [], "status_code_class=500 filter");
    setEq(await msgsOf({ eventTypes: [REFUNDED] }), [this.m2.id, this.m4.id], "event_types filter on attempts");
    setEq(await msgsOf({ channel: "ch-a" }), [this.m1.id, this.m5.id], "channel filter on attempts");
    setEq(await msgsOf({ tag: "t-one" }), [this.m1.id, this.m3.id], "tag filter on attempts");
    for (const a of await this.attemptsByEndpoint(a1.id, ep.id, { withMsg: true })) {
      check(a.msg, `attempt ${a.id} listed with_msg=true has no msg`);
      msgShape(a.msg);
      checkEq([a.msg.id, a.msg.eventType], [a.msgId, this.sent.get(a.msgId).type], `msg of attempt ${a.id}`);
    }

    step("attempts: resend makes a manual attempt with the same svix-id");
    checkEq(this.rx.got("main", m2.id).length, 1, `requests of ${m2.id} at /main before the resend`);
    await svx.messageAttempt.resend(a1.id, m2.id, ep.id);
    const man = await waitFor(`a manual attempt of ${m2.id}`, async () => {
      const atts = await this.attemptsByMsg(a1.id, m2.id, { endpointId: ep.id });
      return [atts.filter((a) => a.triggerType === MessageAttemptTriggerType.Manual && a.status === MessageStatus.Success), show(atts.map((a) => [a.triggerType, a.status]))];
    });
    checkEq(man.length, 1, "manual attempts after one resend");
    checkEq((await this.attemptsByMsg(a1.id, m2.id, { endpointId: ep.id })).length, 2, `attempts of ${m2.id} to ${ep.id} after a resend`);
    const reqs = await this.delivered(m2, "main", 2);
    checkEq(reqs[1].headers["svix-id"], reqs[0].headers["svix-id"], "svix-id of the resent request");
    checkEq(reqs[0].headers["svix-id"], m2.id, "svix-id is the message id");
  }

  async secretsAndHeaders() {
    const { svx, a1 } = this;
    const ep = this.epMain;
    const lower = (h) => Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));
    step("headers: set (PUT), read back");
    await svx.endpoint.setHeaders(a1.id, ep.id, { headers: { "X-Drive-One": "1", "X-Drive-Two": "2" } });
    let h = await svx.endpoint.getHeaders(a1.id, ep.id);
    check(Array.isArray(h.sensitive), "headers.sensitive is not a list");
    checkEq(lower(h.headers), { "x-drive-one": "1", "x-drive-two": "2" }, "headers after PUT");

    step("headers: PATCH with deleteHeaders, read back, delivered");
    await svx.endpoint.patchHeaders(a1.id, ep.id, { headers: { "X-Drive-One": "uno" }, deleteHeaders: ["X-Drive-Two"] });
    h = await svx.endpoint.getHeaders(a1.id, ep.id);
    checkEq(lower(h.headers), { "x-drive-one": "uno" }, "headers after PATCH");
    check(Array.isArray(h.sensitive), "headers.sensitive is not a list");
    let m = await this.send(a1.id, CREATED, ["main"]);
    const r = (await this.delivered(m, "main"))[0].headers;
    checkEq(r["x-drive-one"], "uno", "patched custom header on the delivery");
    check(!("x-drive-two" in r), "a deleted custom header was still sent");

    step("secrets: rotate with a given key (default grace): both secrets sign");
    const s2 = newSecret(48);
    await svx.endpoint.rotateSecret(a1.id, ep.id, { key: s2 });
    this.rx.addSecret("main", s2);
    checkEq((await svx.endpoint.getSecret(a1.id, ep.id)).key, s2, "getSecret after rotate");
    m = await this.send(a1.id, CREATED, ["main"]);
    let req = (await this.delivered(m, "main"))[0];
    checkEq(verifiesWith(req, s2), [true, true], "the new secret verifies a delivery after rotation (svix, standardwebhooks)");
    checkEq(verifiesWith(req, this.sMain), [true, true], "the old secret still verifies during the grace period");

    step("secrets: rotate without a key, gracePeriodSeconds=0: only the new secret signs");
    await svx.endpoint.rotateSecret(a1.id, ep.id, { gracePeriodSeconds: 0 });
    const s3 = (await svx.endpoint.getSecret(a1.id, ep.id)).key;
    check(isStr(s3) && s3.startsWith("whsec_") && s3 !== s2, `generated key ${show(s3)}`);
    const n = secretBytes(s3);
    check(n >= 24 && n <= 64, `generated secret decodes to ${n} bytes`);
    this.rx.addSecret("main", s3);
    m = await this.send(a1.id, REFUNDED, ["main", "refunded"]);
    req = (await this.delivered(m, "main"))[0];
    checkEq(verifiesWith(req, s3), [true, true], "the generated secret verifies a delivery");
    checkEq(verifiesWith(req, s2), [false, false], "the secret expired by gracePeriodSeconds=0 still verifies");
    await this.delivered(m, "refunded");

    step("secrets: gracePeriodSeconds out of range answers 422");
    await expectError("rotate with gracePeriodSeconds=604801", () => svx.endpoint.rotateSecret(a1.id, ep.id, { gracePeriodSeconds: 604801 }), 422);
    checkEq((await svx.endpoint.getSecret(a1.id, ep.id)).key, s3, "a refused rotation must not change the secret");
  }

  async disable() {
    const { svx, a1 } = this;
    const ref = this.epRef;
    step("disable: PATCH disabled=true; a message is not delivered to it");
    checkEq(epShape(await svx.endpoint.patch(a1.id, ref.id, { disabled: true })).disabled, true, "disabled after PATCH");
    checkEq((await svx.endpoint.get(a1.id, ref.id)).disabled, true, "disabled read back");
    let m = await this.send(a1.id, REFUNDED, ["main"]);
    await this.delivered(m, "main");
    const atts = await waitFor(`the not-sent attempt of ${m.id} to the disabled endpoint (docs/svix.md: status 4)`, async () => {
      const all = await this.attemptsByMsg(a1.id, m.id);
      return [all.filter((a) => a.endpointId === ref.id), show(all.map((a) => [a.endpointId, a.status, a.statusText]))];
    });
    for (const a of atts) checkEq([a.status, a.statusText], [MessageStatus.Canceled, "canceled"], "attempt to a disabled endpoint");
    checkEq(this.rx.got("refunded", m.id).length, 0, "requests a disabled endpoint got");

    step("disable: PUT disabled=false; delivered again");
    const u = epShape(await svx.endpoint.upsert(a1.id, ref.id, { url: this.rx.url("refunded"), eventTypes: [REFUNDED], disabled: false }));
    check(!u.disabled, "disabled after PUT disabled=false");
    m = await this.send(a1.id, REFUNDED, ["main", "refunded"]);
    await this.delivered(m, "refunded");
    await this.delivered(m, "main");
  }

  async eventTypes() {
    const svx = this.svx;
    step("event types: list, get");
    const names = (await collect((l, it) => svx.eventType.list({ limit: l, iterator: it }), "event types", 1, 5000, etShape)).map((e) => e.name);
    check(names.includes(CREATED) && names.includes(REFUNDED), `catalog types missing from the event types: ${show(names)}`);
    const et = etShape(await svx.eventType.get(CREATED));
    checkEq([et.name, et.archived], [CREATED, false], "event type");
    if (et.schemas && Object.keys(et.schemas).length) checkEq(Object.keys(et.schemas), ["1"], "event type schemas keys");
    const full = (await svx.eventType.list({ limit: 250, withContent: true })).data;
    check(full.some((e) => e.name === CREATED), "event types listed with_content=true");
    await expectError("GET an event type not in the catalog", () => svx.eventType.get(`drvjs.${this.run}.none`), 404);

    step("event types: create answers 409 for a catalog type, 422 for another");
    await expectError("create of a catalog type", () => svx.eventType.create({ name: CREATED, description: "again" }), 409);
    const e = await expectError("create of a new type", () => svx.eventType.create({ name: `drvjs.${this.run}.new`, description: "new" }), 422);
    checkEq(e.body.detail?.[0]?.type, "catalog_in_config", "422 detail[0].type");
  }

  async portal() {
    const { svx, a1, a2 } = this;
    step("portal: appPortalAccess answers url and token; the url serves the portal page");
    const acc = await svx.authentication.appPortalAccess(a1.id, {});
    check(isStr(acc.token) && acc.token && isStr(acc.url) && acc.url, `app portal access: ${show(acc)}`);
    check(acc.url.includes(acc.token), `the portal url ${acc.url} does not carry the token`);
    const page = await this.raw("GET", acc.url, { token: null });
    checkEq(page.status, 200, `GET ${acc.url.split("#")[0]}`);
    check((page.headers.get("content-type") ?? "").includes("text/html"), `portal page content-type ${page.headers.get("content-type")}`);
    check(/<html|<!doctype html/i.test(page.body.toString()), "portal page is not HTML");

    step("portal: expiry outside 3600..max_session_ttl answers 422");
    await expectError("app portal access expiry=60", () => svx.authentication.appPortalAccess(a1.id, { expiry: 60 }), 422);
    await expectError("app portal access expiry=10000000", () => svx.authentication.appPortalAccess(a1.id, { expiry: 10_000_000 }), 422);

    step("portal: its token reads its own application");
    const p = this.client(acc.token);
    const ids = (await p.endpoint.list(a1.id, { limit: 250 })).data.map((e) => epShape(e).id);
    for (const id of [this.epMain.id, this.epCha.id, this.epRef.id]) check(ids.includes(id), `portal endpoint list lacks ${id}`);
    checkEq((await p.endpoint.get(a1.id, this.epMain.id)).id, this.epMain.id, "portal GET endpoint");
    check((await this.msgIds(a1.id, "portal messages", {}, p)).includes(this.m1.id), "portal message list lacks a message of its application");
    check((await p.messageAttempt.listByMsg(a1.id, this.m1.id)).data.some((a) => a.msgId === this.m1.id), "portal attempts of a message");

    step("portal: not another application, not the secret, not a message");
    await expectError("portal token: endpoints of another application", () => p.endpoint.list(a2.id), [403, 404]);
    await expectError("portal token: an endpoint of another application", () => p.endpoint.get(a2.id, this.epOther.id), [403, 404]);
    await expectError("portal token: messages of another application", () => p.message.list(a2.id), [403, 404]);
    await expectError("portal token: getSecret", () => p.endpoint.getSecret(a1.id, this.epMain.id), 403);
    const before = await this.msgIds(a1.id, "messages");
    await expectError("portal token: create a message", () => p.message.create(a1.id, { eventType: CREATED, payload: { portal: true } }), 403);
    await expectError("portal token: list applications", () => p.application.list(), [401, 403, 404]);
    setEq(await this.msgIds(a1.id, "messages"), before, "messages after the portal's refused message");

    step("portal: a read-only session reads but cannot change");
    const ro = this.client((await svx.authentication.appPortalAccess(a1.id, { readOnly: true, expiry: 3600 })).token);
    check((await ro.endpoint.list(a1.id)).data.length, "read-only portal endpoint list is empty");
    await expectError("read-only portal token: PATCH endpoint", () => ro.endpoint.patch(a1.id, this.epMain.id, { description: "ro" }), 403);
    checkEq((await svx.endpoint.get(a1.id, this.epMain.id)).description, "put", "description after a refused read-only PATCH");
  }

  async ingest() {
    const a1 = this.a1;
    step("ingest token: creates a message; cannot list applications or create an endpoint");
    const ing = this.client(this.ingestToken);
    const m = await this.send(a1.id, CREATED, ["main"], { svx: ing, options: {} });
    await this.delivered(m, "main");
    await expectError("ingest token: list applications", () => ing.application.list(), 403);
    await expectError("ingest token: create an endpoint", () => ing.endpoint.create(a1.id, { url: this.rx.url("ingest") }), 403);
    checkEq((await this.epIds(a1.id)).length, 3, "endpoints after the ingest token's refused create");
  }

  async wrongPaths() {
    const { svx, a1, a2 } = this;
    step("another application's endpoint under the wrong application path answers 404");
    await expectError("GET endpoint of app 2 under app 1", () => svx.endpoint.get(a1.id, this.epOther.id), 404);
    await expectError("getSecret of app 2's endpoint under app 1", () => svx.endpoint.getSecret(a1.id, this.epOther.id), 404);
    await expectError("PATCH endpoint of app 2 under app 1", () => svx.endpoint.patch(a1.id, this.epOther.id, { description: "x" }), 404);
    await expectError("attempts of app 1's message under app 2", () => svx.messageAttempt.listByMsg(a2.id, this.m1.id), 404);
    await expectError("GET an application that does not exist", () => svx.application.get(this.uid("nobody")), 404);

    step("unauthenticated and wrong tokens answer 401 with a JSON body");
    for (const token of [null, "drvjs-wrong-token-0123456789"]) {
      const res = await this.raw("GET", "/api/v1/app", { token });
      checkEq(res.status, 401, `GET /api/v1/app with token ${token}`);
      const b = this.rawJson("401 answer", res);
      check(isStr(b.code) && isStr(b.detail), `401 body ${show(b)} lacks code/detail strings`);
    }

    step("paths with a trailing / work");
    let res = await this.raw("GET", "/api/v1/app/");
    checkEq(res.status, 200, "GET /api/v1/app/");
    check(Array.isArray(this.rawJson("GET /api/v1/app/", res).data), "GET /api/v1/app/ has no data list");
    res = await this.raw("GET", `/api/v1/app/${a1.id}/`);
    checkEq([res.status, this.rawJson("GET app/", res).id], [200, a1.id], `GET /api/v1/app/${a1.id}/`);
    res = await this.raw("GET", `/api/v1/app/${a1.id}/endpoint/${this.epMain.id}/`);
    checkEq(res.status, 200, "GET endpoint with a trailing /");
  }

  async malformed() {
    const { svx, a1 } = this;
    step("malformed bodies answer 422 {detail: [{loc, msg, type}]} and create nothing");
    const epsBefore = await this.epIds(a1.id);
    const msgsBefore = await this.msgIds(a1.id, "messages");
    const cases = [
      ["POST", `/api/v1/app/${a1.id}/endpoint`, JSON.stringify({ url: 5 }), "endpoint with url 5"],
      ["POST", `/api/v1/app/${a1.id}/endpoint`, "{not json", "endpoint, body not JSON"],
      ["POST", `/api/v1/app/${a1.id}/endpoint`, "{}", "endpoint without url"],
      ["POST", `/api/v1/app/${a1.id}/msg`, JSON.stringify({ eventType: 5, payload: {} }), "message with eventType 5"],
      ["POST", `/api/v1/app/${a1.id}/msg`, JSON.stringify({ eventType: CREATED, payload: [1] }), "message with an array payload"],
      ["POST", `/api/v1/app/${a1.id}/msg`, "", "message, empty body"],
      ["PATCH", `/api/v1/app/${a1.id}/endpoint/${this.epMain.id}`, JSON.stringify({ disabled: "yes" }), 'PATCH endpoint disabled "yes"'],
    ];
    for (const [method, path, body, what] of cases) {
      const res = await this.raw(method, path, { body });
      checkEq(res.status, 422, what);
      const b = this.rawJson(what, res);
      check(Array.isArray(b.detail) && b.detail.length, `${what}: 422 body ${show(b)} has no detail list`);
      for (const item of b.detail) {
        check(item && Array.isArray(item.loc) && isStr(item.msg) && isStr(item.type), `${what}: detail item ${show(item)} is not {loc: [...], msg, type}`);
      }
    }
    const e = await expectError("endpoint with an url that is not one (library)", () => svx.endpoint.create(a1.id, { url: "not a url" }), 422);
    check(Array.isArray(e.body.detail) && e.body.detail.length, "the library's 422 has no detail list");
    setEq(await this.epIds(a1.id), epsBefore, "endpoints after malformed requests");
    check(!(await svx.endpoint.get(a1.id, this.epMain.id)).disabled, "endpoint disabled after a malformed PATCH");
    setEq(await this.msgIds(a1.id, "messages"), msgsBefore, "messages after malformed requests");
  }

  async unlisted() {
    const { svx, a1 } = this;
    step("unlisted Svix routes answer 404 code not_supported");
    for (const [method, path] of [
      ["GET", "/api/v1/stats/usage/app"], ["POST", "/api/v1/stats/usage/app"], ["GET", "/api/v1/transformation-template"],
      ["GET", `/api/v1/app/${a1.id}/integration`], ["GET", "/api/v1/background-task"], ["GET", "/api/v1/operational-webhook/endpoint"],
    ]) {
      const res = await this.raw(method, path, { body: method === "POST" ? "{}" : undefined });
      checkEq(res.status, 404, `${method} ${path}`);
      checkEq(this.rawJson(`${method} ${path}`, res).code, "not_supported", `${method} ${path} code`);
    }
    const now = new Date();
    await expectError("statistics.aggregateAppStats", () => svx.statistics.aggregateAppStats({ since: new Date(now - 86_400_000), until: now }), 404, "not_supported");
    await expectError("backgroundTask.list", () => svx.backgroundTask.list(), 404, "not_supported");
    await expectError("integration.list", () => svx.integration.list(a1.id), 404, "not_supported");

    step("every non-2xx answer has a JSON body (405 and 404 included)");
    for (const [method, path] of [["DELETE", "/api/v1/health"], ["GET", "/api/v1/no-such-thing"]]) {
      const res = await this.raw(method, path);
      check(res.status >= 400, `${method} ${path} answered ${res.status}`);
      this.rawJson(`${method} ${path}`, res);
    }
  }

  async finalDeliveries() {
    const { a1, a2 } = this;
    step("deliveries: after a last message to every endpoint, each got exactly its messages");
    const last = await this.send(a1.id, REFUNDED, ["main", "cha", "refunded"], { channels: ["ch-a"] });
    const other = await this.send(a2.id, CREATED, ["other"]);
    for (const path of ["main", "cha", "refunded"]) await this.delivered(last, path);
    await this.delivered(other, "other");
    for (const [path, want] of this.expect) for (const id of want) await this.rx.wait("expected delivery", path, id);
    for (const path of ["main", "cha", "refunded", "other", "put", "ingest"]) {
      const got = this.rx.ids(path);
      const want = this.expect.get(path) ?? new Set();
      const extra = [...got].filter((id) => !want.has(id));
      check(!extra.length, `/${path} got messages it must not: ${extra.map((id) => {
        const s = this.sent.get(id);
        return s ? `${id} (${s.type}, channels ${show(s.channels)})` : String(id);
      }).join(", ")}`);
      setEq([...got], [...want], `messages received at /${path}`);
    }
  }
}

const walk = new Walk();
try {
  await walk.main();
  process.exit(0);
} catch (e) {
  if (!(e instanceof CheckFailed)) console.error(e);
  let extra = "";
  if (e instanceof ApiException) extra = ` (HTTP ${e.code}: ${show(e.body)})`;
  const what = e instanceof CheckFailed ? e.message : `unexpected ${e?.name}: ${e?.message}${extra}`;
  console.error(`FAIL [${LABEL}] at step '${currentStep}': ${what}`);
  walk.rx.close();
  process.exit(1);
}
