// herald pages: endpoints: the list, one endpoint, its actions and snippets.

import { api, catalog, enc, takesType } from "./api.js";
import { minuteChart } from "./chart.js";
import { h, nextId, put } from "./dom.js";
import { breakerPill, count, mono, num, parseJSON, pct, pill, pretty, sentence, utc, when } from "./format.js";
import { account, action, codeBlock, confirmDialog, copyButton, details, dl, errorBox, field, href, link, loading, msg, readOnly, secretBox, select, table, tabs } from "./pieces.js";
import { parseRoute, render, renderTop, section, takeFlash, viewShell } from "./shell.js";
import { APP, S, main } from "./state.js";
import { deliveriesTable } from "./view-deliveries.js";


export function needAccount(title) {
  viewShell(title, h("p", { class: "empty" }, "Pick an account in the Account box above, or open one from ",
    link("Accounts", "/accounts"), "."),
    (S.accounts || []).length ? h("ul", { class: "plain" }, S.accounts.slice(0, 50).map((a) =>
      h("li", null, link(a.account_id, `/${section(parseRoute().parts)}`, { account_id: a.account_id }, "mono")))) : null);
}

export async function endpointsWithHealth(acc) {
  // The list carries each endpoint's health (breaker, last hour, last success, pending).
  const list = await api("GET", `/v1/accounts/${enc(acc)}/endpoints`);
  return list.items || [];
}

export async function viewEndpoints(ctx) {
  const acc = account();
  if (!acc) return needAccount("Endpoints");
  const create = readOnly() ? null : link("Create endpoint", "/endpoints/new", {}, "btn primary");
  viewShell("Endpoints", loading());
  const eps = await endpointsWithHealth(acc);
  if (ctx.stale()) return;
  const head = h("div", { class: "row-end" }, APP === "console" ? h("span", { class: "muted" }, "Account ", mono(acc)) : null, create);
  if (!eps.length) {
    put(main, main.querySelector("h1"), takeFlash(), head,
      h("div", { class: "empty-state" }, h("p", null, "No endpoints yet — ",
        readOnly() ? "none has been set up for this account." : link("Create endpoint", "/endpoints/new"),
        readOnly() ? null : " to receive webhooks at your URL.")));
    return;
  }
  const rows = eps.map((e) => h("tr", null,
    h("td", { class: "url-cell" }, h("a", { href: `#/endpoints/${enc(e.id)}`, class: "mono" }, e.url),
      e.description ? h("div", { class: "sub" }, e.description) : null),
    h("td", null, pill(e.state)),
    h("td", null, e.verified ? pill("verified", "ok") : pill("unverified", "warn")),
    h("td", null, typesCell(e.event_types)),
    h("td", { class: "num" }, e.attempts_1h ? `${pct(e.success_rate_1h)} of ${num(e.attempts_1h)}` : h("span", { class: "muted" }, "no attempts")),
    h("td", null, when(e.last_success_at, "never")),
    h("td", null, e.breaker ? breakerPill(e.breaker.state) : "—"),
    h("td", { class: "num" }, num(e.pending))));
  put(main, main.querySelector("h1"), takeFlash(), head,
    table(["URL", "State", "Verified", "Event types", "Success (1 h)", "Last success", "Breaker", "Pending"], rows, { caption: "Endpoints" }));
}

export function typesCell(types) {
  if (!types || !types.length) return h("span", { class: "muted" }, "all types");
  return h("span", { class: "chips" }, types.map((t) => h("code", { class: "chip mono" }, t)));
}

export async function viewEndpoint(ctx, id) {
  viewShell("Endpoint", loading());
  const [ep, stats, cat] = await Promise.all([
    api("GET", `/v1/endpoints/${enc(id)}`),
    api("GET", `/v1/endpoints/${enc(id)}/stats`).catch(() => null),
    catalog().catch(() => []),
  ]);
  if (ctx.stale()) return;
  if (APP === "console") S.account = ep.account_id;
  renderTop(parseRoute());
  const out = h("div", { class: "out", "aria-live": "polite" });
  const refresh = () => render();
  const ro = readOnly();
  const actions = ro ? null : h("div", { class: "actions toolbar", role: "group", "aria-label": "Endpoint actions" },
    link("Edit", `/endpoints/${enc(ep.id)}/edit`, {}, "btn"),
    ep.state === "active"
      ? action("Pause", async () => { await act(out, () => api("POST", `/v1/endpoints/${enc(ep.id)}/pause`), "Paused: deliveries due while paused end skipped / paused."); })
      : action("Resume", async () => { await act(out, () => api("POST", `/v1/endpoints/${enc(ep.id)}/resume`), "Resumed: deliveries go out again."); }),
    action("Verify", async () => verify(ep, out)),
    action("Rotate secret", async () => rotate(ep, out)),
    action("Delete", async () => del(ep, out), { kind: "danger" }));

  async function act(box, fn, okText) {
    put(box, loading("Working…"));
    try {
      await fn();
      S.flash = { kind: "ok", kids: [okText] };
      refresh();
    } catch (err) {
      put(box, errorBox(err));
    }
  }

  const h1 = main.querySelector("h1");
  h1.textContent = "Endpoint";
  const header = h("div", { class: "obj-head" },
    h("p", { class: "big mono url-line" }, ep.url),
    ep.description ? h("p", { class: "sub" }, ep.description) : null,
    h("div", { class: "pills" }, pill(ep.state), ep.verified ? pill("verified", "ok") : pill("unverified", "warn"),
      ep.breaker ? h("span", { class: "pill-label" }, "breaker ", breakerPill(ep.breaker.state)) : null));
  const facts = h("div");
  const fillFacts = (ep) => put(facts, factsOf(ep));
  fillFacts(ep);
  const chart = chartSection(ep, stats);
  // After an action that sends (a test event), the figures, the recent deliveries and the
  // chart are read again.
  const reread = async () => {
    const fresh = await api("GET", `/v1/endpoints/${enc(ep.id)}`).catch(() => null);
    if (fresh && !ctx.stale()) fillFacts(fresh);
    const list = await recentDeliveries(ep, ctx);
    if (list && !ctx.stale()) put(recent, list);
    await chart.redraw();
  };
  const headers = Object.entries(ep.headers || {});

  // Production mode: an unverified endpoint gets nothing, and the page says so first.
  const unverified = !ep.verified && S.session && S.session.require_verification
    ? msg("error", h("strong", null, "This endpoint receives nothing yet: it is not verified. "),
      "Every delivery to it is skipped (status unverified) until it passes verification. ",
      ro ? "Ask someone who can change endpoints to press Verify." : "Press Verify: we send a challenge your receiver answers (the Advanced tab has the code), and deliveries start once it does.")
    : null;
  if (unverified) unverified.classList.add("banner");
  const disabled = ep.state === "disabled" ? await disabledBanner(ep, ro, act, out) : null;
  if (ctx.stale()) return;
  const recent = h("div");
  put(recent, await recentDeliveries(ep, ctx));
  if (ctx.stale()) return;
  // One page, four tabs: how it is doing, what it got, how it is set up, and the tools.
  put(main, h1, takeFlash(), unverified, disabled, header, actions, out,
    tabs("Endpoint", [
      ["overview", "Overview", [
        h("section", { class: "card", "aria-labelledby": "ep-health" }, h("h2", { id: "ep-health" }, "Health"), facts),
        chart.node]],
      ["deliveries", "Deliveries", [recent, ro ? null : recoverSection(ep)]],
      ["settings", "Settings", [
        h("section", { class: "card", "aria-labelledby": "ep-facts" }, h("h2", { id: "ep-facts" }, "Details"), settingsOf(ep),
          headers.length ? h("div", null, h("h3", null, "Custom headers"),
            table(["Header", "Value"], headers.map(([k, v]) => h("tr", null, h("td", null, mono(k)), h("td", null, mono(v)))), { caption: "Custom headers" })) : null)]],
      ["advanced", "Advanced", [ro ? null : testSection(ep, cat, reread), snippetSection(ep)]],
    ], ctx.q.get("tab")));
}

// How the endpoint is doing (the Overview tab).
// Why a disabled endpoint gets nothing, since when, and the way back: the engine disables an
// endpoint for one of two reasons, its receiver's 410 Gone (its last delivery says so) or
// every attempt failing for `endpoints.disable_after`.
async function disabledBanner(ep, ro, act, out) {
  const q = new URLSearchParams({ endpoint_id: ep.id, limit: "1" });
  if (APP === "console") q.set("account_id", ep.account_id);
  const last = await api("GET", `/v1/deliveries?${q}`).then((r) => (r.items || [])[0]).catch(() => null);
  const why = last && last.last_http_status === 410
    ? "the receiver answered 410 Gone, which says it wants no more webhooks"
    : "every attempt failed for longer than the time allowed";
  const resume = ro ? null : action("Resume", async () => {
    await act(out, () => api("POST", `/v1/endpoints/${enc(ep.id)}/resume`), "Resumed: deliveries go out again.");
  }, { kind: "primary" });
  const banner = msg("error", h("strong", null, "This endpoint is disabled: nothing is sent to it. "),
    `It was disabled `, when(ep.updated_at), ` because ${why}. `,
    ro ? "Ask someone who can change endpoints to resume it once the receiver is fixed." : "Resume it once the receiver is fixed: new deliveries go out again.",
    resume ? h("div", { class: "actions" }, resume) : null);
  banner.classList.add("banner", "disabled-banner");
  return banner;
}

function factsOf(ep) {
  return dl([
    ["Success (1 h)", ep.attempts_1h ? `${pct(ep.success_rate_1h)} of ${count(ep.attempts_1h, "attempt")}` : "no attempts in the last hour"],
    ["Last success", when(ep.last_success_at, "never")],
    ["Pending", num(ep.pending)],
    ["Breaker", ep.breaker ? h("span", null, breakerPill(ep.breaker.state), ep.breaker.consecutive_failures ? ` ${count(ep.breaker.consecutive_failures, "failure")} in a row` : "",
      ep.breaker.next_probe_at ? h("span", null, ", next probe ", when(ep.breaker.next_probe_at)) : "") : "—"],
  ]);
}

// How it is set up (the Settings tab).
function settingsOf(ep) {
  return dl([
    ["Endpoint id", h("span", { class: "with-copy" }, mono(ep.id), copyButton(ep.id, "Copy id"))],
    ["Account", mono(ep.account_id)],
    ["Event types", typesCell(ep.event_types)],
    ["Retry policy", mono(ep.retry_policy || "—")],
    ["Signature", ep.signature === "ed25519" ? "Ed25519 (v1a)" : "HMAC-SHA256 (v1)"],
    ["Created", when(ep.created_at)],
    ["Updated", when(ep.updated_at)],
    ep.client_certificate ? ["Client certificate", h("span", null, ep.client_certificate.subject, ", until ", when(ep.client_certificate.not_after))] : null,
    ep.ordering ? ["Ordering", ep.ordering.key === null ? "whole endpoint in order" : h("span", null, "by ", mono(ep.ordering.key))] : null,
    ep.rate_limit ? ["Rate limit", `${ep.rate_limit.per_second} per second`] : null,
    ep.propagate_trace ? ["Trace", "passed on to the receiver (traceparent)"] : null,
    ["Payload filter", ep.filter ? h("pre", { class: "code filter-shown" }, pretty(ep.filter)) : "none: every event of its types"],
  ]);
}

// What each chart window's entries are, for its title.
const PER = { 1: "per minute", 15: "per 15 minutes", 120: "per 2 hours" };

// The endpoint's attempts by status over the last hour (per minute), day (per 15 minutes) or
// week (per 2 hours), with the latency of its requests, from the counts the store keeps.
function chartSection(ep, first) {
  const box = h("div");
  const draw = (st) => put(box, st
    ? [latencyLine(st.latency_ms),
      minuteChart(st.minutes, { latency: true, bucket: st.bucket_minutes || 1,
        title: `Attempts ${PER[st.bucket_minutes] || PER[1]} by status, and p50 and p95 latency` })]
    : h("p", { class: "muted" }, "No statistics."));
  const win = select([["1h", "Last hour, per minute"], ["24h", "Last 24 hours, per 15 minutes"], ["7d", "Last 7 days, per 2 hours"]], "1h", { id: nextId("win") });
  const redraw = async () => draw(await api("GET", `/v1/endpoints/${enc(ep.id)}/stats?window=${win.value}`).catch(() => null));
  win.addEventListener("change", async () => {
    put(box, loading());
    await redraw();
  });
  draw(first);
  const node = h("section", { class: "card", "aria-labelledby": "ep-chart" },
    h("div", { class: "section-head" }, h("h2", { id: "ep-chart" }, "Attempts"), field("Chart window", win)),
    box);
  return { node, redraw };
}

// The window's latency in one line: p50, p95 and max of the requests sent.
function latencyLine(l) {
  if (!l || l.p50 === null || l.p50 === undefined) return null;
  const ms = (v) => (v >= 1000 ? `${(v / 1000).toFixed(v >= 10000 ? 0 : 1)} s` : `${v} ms`);
  return h("p", { class: "muted latency-line" }, `Latency of the requests sent: p50 ${ms(l.p50)} · p95 ${ms(l.p95)} · max ${ms(l.max)}`);
}

export async function verify(ep, out) {
  put(out, loading("Sending a verification challenge…"));
  try {
    const v = await api("POST", `/v1/endpoints/${enc(ep.id)}/verify`);
    const a = v.attempt || {};
    if (v.verified) {
      S.flash = { kind: "ok", kids: ["Verified: the endpoint answered the challenge correctly."] };
      render();
      return;
    }
    // What happened in the customer's words; herald's own line and the answer behind Details.
    put(out, msg("error", h("strong", null, "Not verified. "), verifyWords(a),
      details([pill(a.status), a.http_status ? ` HTTP ${a.http_status}` : "", typeof a.duration_ms === "number" ? ` in ${a.duration_ms} ms` : "",
        v.reason ? ` — ${sentence(v.reason)}` : ""]),
      a.response_body ? h("pre", { class: "code small" }, a.response_body) : null));
  } catch (err) {
    put(out, errorBox(err));
  }
}

// Why a verification failed, by the attempt's status, as a customer would say it.
function verifyWords(a) {
  switch (a.status) {
    case "connection_error": return "We could not connect to your receiver: check that it is running and reachable at this address.";
    case "timeout": return "Your receiver did not answer in time.";
    case "tls_error": return "The secure connection to your receiver failed: check its certificate.";
    case "blocked": return "This address is not allowed: it points to a private or internal network.";
    case "http_error": return `Your receiver answered with an error${a.http_status ? ` (HTTP ${a.http_status})` : ""} instead of the challenge.`;
    default: return "Your receiver answered, but not with the challenge: the Advanced tab has the code that answers it.";
  }
}

export async function rotate(ep, out) {
  const ok = await confirmDialog("Rotate the signing secret?",
    h("p", null, "A new secret signs from now on. The current one keeps signing beside it for the rotation grace period (24 h by default), so update your receiver within that time."),
    "Rotate secret");
  if (!ok) return;
  put(out, loading("Rotating…"));
  try {
    const r = await api("POST", `/v1/endpoints/${enc(ep.id)}/secret/rotate`);
    put(out, r.public_key
      ? secretBox("New public key", r.public_key, "Verify with this key from now on; the previous key's signatures keep coming during the grace period.")
      : secretBox("New signing secret", r.secret, "This secret will not be shown again. Copy it now and give it to your receiver; the previous secret keeps signing during the grace period."));
    const c = out.querySelector("button");
    if (c) c.focus();
  } catch (err) {
    put(out, errorBox(err));
  }
}

export async function del(ep, out) {
  const ok = await confirmDialog("Delete this endpoint?",
    h("div", null, h("p", { class: "mono url-line" }, ep.url),
      h("p", null, "Its pending deliveries end now (skipped / no_endpoint) and nothing more is sent to it. The delivery log keeps what was sent. This cannot be undone.")),
    "Delete", { danger: true });
  if (!ok) return;
  put(out, loading("Deleting…"));
  try {
    await api("DELETE", `/v1/endpoints/${enc(ep.id)}`);
    S.flash = { kind: "ok", kids: ["Endpoint deleted: ", mono(ep.url)] };
    location.hash = href("/endpoints", { account_id: APP === "console" ? ep.account_id : undefined });
  } catch (err) {
    put(out, errorBox(err));
  }
}

// "Send a test event": a type the endpoint takes by default (never a deprecated one, the
// generic webhook.test when it takes none of the catalog's), its sample editable before
// sending (the API checks an edited payload against the type's schema and sends nothing when
// it does not pass).
export function testSection(ep, cat, onSent = async () => {}) {
  const patterns = ep.event_types || [];
  const takes = (t) => takesType(patterns, t);
  const types = cat.filter((t) => t.sample !== null && t.sample !== undefined);
  const ordered = [
    ...types.filter((t) => takes(t.type) && !t.deprecated),
    ...types.filter((t) => takes(t.type) && t.deprecated),
    ...types.filter((t) => !takes(t.type)),
  ];
  const label = (t) => `${t.type}${t.deprecated ? " (deprecated)" : ""}${takes(t.type) ? "" : " (not one of this endpoint's types)"}`;
  const opts = ordered.map((t) => [t.type, label(t)]);
  opts.push(["webhook.test", "webhook.test (a generic test message)"]);
  const first = ordered.find((t) => takes(t.type) && !t.deprecated);
  const sel = select(opts, first ? first.type : "webhook.test", { id: nextId("tt") });
  const about = h("div");
  const text = h("textarea", { id: nextId("tp"), class: "mono", spellcheck: "false", rows: "8" });
  const out = h("div", { "aria-live": "polite" });
  let prefilled = "";
  const showSample = () => {
    const t = types.find((x) => x.type === sel.value);
    const sample = t ? t.sample : { type: "webhook.test", message: "A test event. If you can read this, your endpoint receives webhooks.", sent_at: new Date().toISOString() };
    prefilled = pretty(sample);
    text.value = prefilled;
    text.rows = Math.min(20, Math.max(5, prefilled.split("\n").length + 1));
    put(about,
      t && t.description ? h("p", { class: "sub" }, t.description) : null,
      t && t.deprecated ? h("p", { class: "deprecation" }, t.replaced_by ? `Deprecated — use ${t.replaced_by} instead.` : "Deprecated.") : null);
    put(out);
  };
  sel.addEventListener("change", showSample);
  showSample();
  const send = action("Send test event", async () => {
    const body = { type: sel.value };
    // An edited payload is sent as written; the sample as it is (webhook.test's is made anew).
    if (text.value.trim() !== prefilled.trim()) {
      try {
        body.payload = parseJSON(text.value);
      } catch (e) {
        put(out, msg("error", `The payload is not valid JSON: ${e.message}`));
        text.focus();
        return;
      }
    }
    put(out, loading("Sending…"));
    try {
      const r = await api("POST", `/v1/endpoints/${enc(ep.id)}/test`, body);
      const a = r.attempt;
      put(out, msg(a && a.status === "delivered" ? "ok" : a ? "error" : "info",
        a ? h("span", null, "Sent: ", pill(a.status), a.http_status ? ` HTTP ${a.http_status}` : "", ` in ${a.duration_ms} ms`, a.error ? ` — ${a.error}` : "", ". ")
          : "Queued: the attempt had not finished yet. ",
        h("a", { href: `#/deliveries/${enc(r.delivery_id)}` }, "Open the delivery")));
      await onSent();
    } catch (err) {
      put(out, err.code === "schema_violation" ? msg("error", "Not sent: ", err.message) : errorBox(err));
    }
  }, { kind: "primary" });
  return h("section", { class: "card", "aria-labelledby": "ep-test" },
    h("h2", { id: "ep-test" }, "Send a test event"),
    field("Event type", sel), about,
    field("Payload", text, "Sent as written, signed like every delivery. Edit it to try your receiver with other values."),
    h("div", { class: "actions" }, send), out);
}

export function localInput(ms) {
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

export function recoverSection(ep) {
  const since = h("input", { type: "datetime-local", id: nextId("since"), value: localInput(Date.now() - 86400e3), step: "60" });
  const out = h("div", { "aria-live": "polite" });
  const go = action("Recover", async () => {
    const t = new Date(since.value);
    if (!since.value || Number.isNaN(t.getTime())) {
      put(out, msg("error", "Pick the time to recover from."));
      since.focus();
      return;
    }
    const iso = t.toISOString();
    put(out, loading("Counting…"));
    try {
      const dry = await api("POST", `/v1/endpoints/${enc(ep.id)}/recover`, { since: iso, dry_run: true });
      put(out);
      if (!dry.deliveries) {
        put(out, msg("info", `Nothing to recover: no failed or skipped deliveries since ${utc(iso)}.`));
        return;
      }
      const n = `${dry.more ? "at least " : ""}${num(dry.deliveries)} ${dry.deliveries === 1 ? "delivery" : "deliveries"}`;
      const ok = await confirmDialog(`Recover ${n} since ${utc(iso)}?`,
        h("p", null, `Each failed or skipped delivery of this endpoint since then gets one new attempt now, with its original webhook-id.${dry.more ? " There are more: run Recover again afterwards." : ""}`),
        "Recover");
      if (!ok) {
        put(out, msg("info", "Nothing was recovered."));
        return;
      }
      put(out, loading("Recovering…"));
      const r = await api("POST", `/v1/endpoints/${enc(ep.id)}/recover`, { since: iso });
      put(out, msg("ok", `Recovering ${num(r.recovered)} ${r.recovered === 1 ? "delivery" : "deliveries"}: each gets a new attempt now (if the circuit breaker opens, the rest wait for its probe). `,
        link("Watch them in the log", "/deliveries", { endpoint_id: ep.id, account_id: APP === "console" ? ep.account_id : undefined })));
    } catch (err) {
      put(out, errorBox(err));
    }
  });
  return h("section", { class: "card", "aria-labelledby": "ep-rec" },
    h("h2", { id: "ep-rec" }, "Recover failed deliveries"),
    h("p", { class: "sub" }, "After an outage: attempt every failed or skipped delivery of this endpoint again. You see how many before anything is sent."),
    h("div", { class: "inline-form" }, field("Since", since, "Your local time."), go), out);
}

export async function recentDeliveries(ep, ctx) {
  let list;
  try {
    const q = new URLSearchParams({ endpoint_id: ep.id, limit: "10" });
    if (APP === "console") q.set("account_id", ep.account_id);
    list = await api("GET", `/v1/deliveries?${q}`);
  } catch (err) {
    return h("section", { class: "card" }, h("h2", null, "Recent deliveries"), errorBox(err));
  }
  if (ctx.stale()) return null;
  const items = list.items || [];
  const more = link("All deliveries of this endpoint", "/deliveries", { endpoint_id: ep.id, account_id: APP === "console" ? ep.account_id : undefined });
  return h("section", { class: "card", "aria-labelledby": "ep-recent" },
    h("h2", { id: "ep-recent" }, "Recent deliveries"),
    items.length ? deliveriesTable(items, new Map([[ep.id, ep]]), { endpoint: false }) : h("p", { class: "empty" }, "Nothing delivered to this endpoint yet — send a test event from the Advanced tab."),
    h("p", null, more));
}

export function snippetSection(ep) {
  const ed = ep.signature === "ed25519";
  const key = ed ? (ep.public_key || "whpk_...") : "whsec_...";
  const py = ed ? `# pip install cryptography
import base64, time
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

PUBLIC_KEY = "${key}"  # this endpoint's public key
key = Ed25519PublicKey.from_public_bytes(base64.b64decode(PUBLIC_KEY.removeprefix("whpk_")))

def verified(body: bytes, headers) -> bool:
    """body: the raw request bytes, before any JSON parsing."""
    msg_id, ts = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(ts)) > 300:  # replay protection: 5 minutes
        return False
    signed = f"{msg_id}.{ts}.".encode() + body
    for sig in headers["webhook-signature"].split(" "):
        version, _, value = sig.partition(",")
        if version == "v1a":
            try:
                key.verify(base64.b64decode(value), signed)
                return True
            except InvalidSignature:
                pass
    return False
` : `# pip install standardwebhooks
from standardwebhooks import Webhook, WebhookVerificationError

webhook = Webhook("${key}")  # this endpoint's secret (shown once, at creation or rotation)

def handle(body: bytes, headers: dict) -> int:
    """body: the raw request bytes, before any JSON parsing."""
    try:
        # Checks webhook-id, webhook-timestamp (within 5 min) and webhook-signature (v1,...).
        event = webhook.verify(body, headers)
    except WebhookVerificationError:
        return 401  # not signed by us: a 401 is not retried
    # Answer 2xx within 5 s and queue the work; dedupe on headers["webhook-id"].
    return 200
`;
  const js = ed ? `// Node 18+: no dependency
import { createPublicKey, verify } from "node:crypto";

const PUBLIC_KEY = "${key}"; // this endpoint's public key
const key = createPublicKey({
  key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(PUBLIC_KEY.replace(/^whpk_/, ""), "base64").toString("base64url") },
  format: "jwk",
});

// body: the raw request bytes (a Buffer), before any JSON parsing; headers: req.headers
export function verified(body, headers) {
  const id = headers["webhook-id"], ts = headers["webhook-timestamp"];
  if (Math.abs(Date.now() / 1000 - Number(ts)) > 300) return false; // replay protection
  const signed = Buffer.concat([Buffer.from(\`\${id}.\${ts}.\`), body]);
  return headers["webhook-signature"].split(" ").some((s) => {
    const [version, value] = s.split(",");
    return version === "v1a" && verify(null, signed, key, Buffer.from(value, "base64"));
  });
}
` : `// npm install standardwebhooks
import { Webhook } from "standardwebhooks";

const webhook = new Webhook(process.env.HERALD_SECRET); // this endpoint's whsec_... secret

// body: the raw request bytes (a Buffer), before any JSON parsing; headers: req.headers
export function handle(body, headers) {
  try {
    // Checks webhook-id, webhook-timestamp (within 5 min) and webhook-signature (v1,...).
    const event = webhook.verify(body, headers);
  } catch {
    return 401; // not signed by us: a 401 is not retried
  }
  // Answer 2xx within 5 s and queue the work; dedupe on headers["webhook-id"].
  return 200;
}
`;
  return h("section", { class: "card", "aria-labelledby": "ep-snip" },
    h("h2", { id: "ep-snip" }, "Verify the signature"),
    h("p", { class: "sub" }, ed
      ? ["We sign each request with Ed25519 (Standard Webhooks ", mono("v1a,"), "): the signature of ", mono("{webhook-id}.{webhook-timestamp}.{raw body}"), " in ", mono("webhook-signature"), "."]
      : ["We sign each request as Standard Webhooks does: ", mono("webhook-signature: v1,<base64 HMAC-SHA256>"), " of ", mono("{webhook-id}.{webhook-timestamp}.{raw body}"), ", keyed by the base64-decoded secret after ", mono("whsec_"), ". During a rotation there is one value per secret, space-separated."]),
    h("details", { open: true }, h("summary", null, "Python"), codeBlock(py, { label: "Python receiver" })),
    h("details", null, h("summary", null, "Node.js"), codeBlock(js, { label: "Node.js receiver" })),
    h("p", { class: "hint" }, "Verification challenge (Verify button): answer ", mono("{\"hmac\": \"<hex HMAC-SHA256(key, nonce)>\"}"),
      ed ? " keyed by the public key's 32 bytes." : " keyed by the secret's bytes."));
}
