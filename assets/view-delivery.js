// herald pages: one delivery, top to bottom; one event.

import { ApiError, api, enc, endpointsById } from "./api.js";
import { h, nextId, put } from "./dom.js";
import { mono, num, pill, pretty, utc, waitingText, when } from "./format.js";
import { action, codeBlock, confirmDialog, copyButton, dl, endpointLink, errorBox, field, link, loading, msg, readOnly, select, table } from "./pieces.js";
import { parseRoute, renderTop, setTitle, takeFlash, viewShell } from "./shell.js";
import { APP, S, main } from "./state.js";
import { deliveriesTable } from "./view-deliveries.js";


export async function viewDelivery(ctx, id) {
  viewShell("Delivery", loading());
  let d = await api("GET", `/v1/deliveries/${enc(id)}`).catch((err) => {
    if (err instanceof ApiError && err.status === 404) {
      viewShell("Delivery not found", errorBox(err, "delivery"),
        h("p", null, link("Back to the delivery log", "/deliveries")));
      return null;
    }
    throw err;
  });
  if (!d || ctx.stale()) return;
  if (APP === "console") S.account = d.account_id;
  renderTop(parseRoute());
  const [ev, ep] = await Promise.all([
    api("GET", `/v1/events/${enc(d.event_id)}`).catch((err) => ({ error: err })),
    d.endpoint_id ? api("GET", `/v1/endpoints/${enc(d.endpoint_id)}`).catch(() => null) : null,
  ]);
  if (ctx.stale()) return;
  const ro = readOnly();
  const out = h("div", { "aria-live": "polite" });
  const where = h("section", { class: "card", "aria-labelledby": "d-where" });
  const attempts = h("section", { class: "card", "aria-labelledby": "d-att" });
  const opened = new Set();
  const fill = (dd) => {
    put(where, h("h2", { id: "d-where" }, "Where it stands"), dl([
      ["State", pill(dd.state)],
      ["Last status", h("span", null, pill(dd.last_status), dd.last_http_status ? ` HTTP ${dd.last_http_status}` : "")],
      ["Attempts", num(dd.attempt_count)],
      ["Next attempt", dd.state === "pending" ? when(dd.next_attempt_at, "not scheduled") : h("span", { class: "muted" }, "none: it has ended")],
      dd.state === "pending" ? ["Why waiting", waitingText(dd.waiting)] : null,
      dd.ordering_key !== undefined && dd.ordering_key !== null ? ["Ordering key", mono(String(dd.ordering_key))] : null,
      dd.waiting_for ? ["Waiting for", h("a", { href: `#/deliveries/${enc(dd.waiting_for)}`, class: "mono" }, dd.waiting_for)] : null,
    ]));
    const list = (dd.attempts || []).slice().sort((a, b) => b.number - a.number);
    if (!opened.size && list.length) opened.add(list[0].id);
    put(attempts, h("h2", { id: "d-att" }, `Attempts (${list.length})`),
      list.length ? attemptsTable(list, opened) : h("p", { class: "empty" }, dd.state === "pending" ? "No attempt yet — the first one is due " : "No attempts.", dd.state === "pending" ? when(dd.next_attempt_at) : null));
  };
  fill(d);

  const retry = ro ? null : action("Retry", async (b) => {
    const before = (d.attempts || []).length;
    put(out, loading("Retrying…"));
    try {
      const r = await api("POST", `/v1/deliveries/${enc(d.id)}/retry`);
      if (r.waiting && r.waiting.reason === "breaker") {
        // The breaker holds every delivery to the endpoint, a retry too: say so, do not wait.
        d = await api("GET", `/v1/deliveries/${enc(d.id)}`);
        if (ctx.stale()) return;
        fill(d);
        put(out, msg("info", "Retry queued. The endpoint keeps failing, so its deliveries are held until the next probe ",
          when(r.waiting.until), ": this retry goes then (same webhook-id), or when the endpoint recovers."));
        return;
      }
      put(out, msg("info", "Retry sent: a new attempt is being made now, with the same webhook-id."));
      // The attempt runs now: wait for it to be recorded (bounded), then show it.
      const deadline = Date.now() + 20000;
      let nd = d;
      while (Date.now() < deadline && !ctx.stale()) {
        await new Promise((r) => setTimeout(r, 300));
        nd = await api("GET", `/v1/deliveries/${enc(d.id)}`);
        if ((nd.attempts || []).length > before) break;
      }
      if (ctx.stale()) return;
      d = nd;
      opened.clear();
      fill(d);
      const last = (d.attempts || []).reduce((a, x) => (!a || x.number > a.number ? x : a), null);
      put(out, last && (d.attempts || []).length > before
        ? msg(last.status === "delivered" ? "ok" : "error", `Attempt ${last.number}: `, pill(last.status), last.http_status ? ` HTTP ${last.http_status}` : "", ` in ${last.duration_ms} ms.`)
        : msg("info", "The retry is queued; reload to see its attempt."));
      b.focus();
    } catch (err) {
      put(out, errorBox(err));
    }
  }, { kind: "primary" });
  const replay = ro || (ev && ev.error) ? null : action("Replay", async () => replayDialog(ev, d.endpoint_id, out));

  const what = h("section", { class: "card", "aria-labelledby": "d-what" },
    h("h2", { id: "d-what" }, "What"),
    dl([
      ["Event type", mono(d.event_type)],
      ["Delivery id", h("span", { class: "with-copy" }, mono(d.id), copyButton(d.id, "Copy id"))],
      ["Event id (webhook-id)", h("a", { href: `#/events/${enc(d.event_id)}`, class: "mono" }, d.event_id)],
      ["Endpoint", d.endpoint_id ? h("span", null, endpointLink(d.endpoint_id, ep), ep ? null : h("span", { class: "muted" }, " (deleted)")) : h("span", { class: "muted" }, "none (no endpoint subscribed)")],
      APP === "console" ? ["Account", link(d.account_id, "/deliveries", { account_id: d.account_id }, "mono")] : null,
      ["Created", when(d.created_at)],
    ]));
  const payload = h("section", { class: "card", "aria-labelledby": "d-payload" },
    h("h2", { id: "d-payload" }, "Payload"),
    ev && ev.error ? errorBox(ev.error) : [h("p", { class: "hint" }, "Received ", when(ev.received_at), ". Sent byte for byte as received; shown indented here."),
      codeBlock(pretty(ev.payload), { label: "Event payload" })]);
  const h1 = main.querySelector("h1");
  h1.textContent = `Delivery of ${d.event_type}`;
  setTitle(`Delivery ${d.id}`);
  put(main, h1, takeFlash(),
    h("p", { class: "crumbs" }, link("Deliveries", "/deliveries"), " / ", mono(d.id)),
    ro ? null : h("div", { class: "actions toolbar", role: "group", "aria-label": "Delivery actions" }, retry, replay,
      h("span", { class: "hint inline" }, "Retry sends this delivery again now (same webhook-id); Replay sends the event again as a new event.")),
    out, what, where, attempts, payload);
}

export function attemptsTable(list, opened) {
  const rows = [];
  for (const a of list) {
    const did = `att-${a.id}`;
    const open = opened.has(a.id);
    const detail = h("tr", { class: "detail", id: did, hidden: !open },
      h("td", { colspan: "6" }, attemptDetail(a)));
    const toggle = h("button", { type: "button", class: "disclose", "aria-expanded": open ? "true" : "false", "aria-controls": did },
      `Attempt ${a.number}`);
    toggle.addEventListener("click", () => {
      const now = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", now ? "true" : "false");
      detail.hidden = !now;
      if (now) opened.add(a.id); else opened.delete(a.id);
    });
    rows.push(h("tr", { class: "attempt" },
      h("td", null, toggle),
      h("td", null, when(a.at)),
      h("td", null, pill(a.status)),
      h("td", { class: "num" }, a.http_status ? String(a.http_status) : "—"),
      h("td", { class: "num" }, `${num(a.duration_ms)} ms`),
      h("td", { class: "err-cell" }, a.error || "")), detail);
  }
  return table(["Attempt", "Time", "Status", "HTTP", "Duration", "Error"], rows, { caption: "Attempts, newest first", cls: "attempts" });
}

export function attemptDetail(a) {
  const hdrs = Object.entries(a.request_headers || {});
  const answered = Object.entries(a.response_headers || {});
  return h("div", { class: "attempt-detail" },
    dl([
      ["Attempt id", mono(a.id)],
      ["Time", h("span", null, utc(a.at))],
      ["Response code", a.http_status ? mono(String(a.http_status)) : h("span", { class: "muted" }, "none (not answered)")],
      ["Duration", `${num(a.duration_ms)} ms`],
      a.error ? ["Error", h("span", { class: "err-text" }, a.error)] : null,
    ]),
    h("h3", null, "Request headers"),
    hdrs.length ? table(["Header", "Value"], hdrs.map(([k, v]) => h("tr", null, h("td", null, mono(k)), h("td", { class: "break" }, mono(v)))), { caption: "Request headers" })
      : h("p", { class: "muted" }, "No request was sent (the attempt was decided without one)."),
    h("h3", null, "Response headers"),
    answered.length ? table(["Header", "Value"], answered.map(([k, v]) => h("tr", null, h("td", null, mono(k)), h("td", { class: "break" }, mono(v)))), { caption: "Response headers" })
      : h("p", { class: "muted" }, a.http_status ? "None kept (this attempt was recorded before they were)." : "No response."),
    h("h3", null, "Response excerpt"),
    a.response_body ? codeBlock(a.response_body, { label: "Response body excerpt" }) : h("p", { class: "muted" }, "(empty)"));
}

export async function replayDialog(ev, endpointId, out) {
  const to = select([...(endpointId ? [["one", "Only this delivery's endpoint"]] : []), ["all", "Every endpoint subscribed to this type"]], endpointId ? "one" : "all", { id: nextId("to") });
  const ok = await confirmDialog("Replay this event as a new event?",
    h("div", null, h("p", null, "The same payload is sent again as a new event, with a new event id (and a new webhook-id), now. Receivers that dedupe on webhook-id process it again."),
      field("Send to", to)), "Replay");
  if (!ok) return;
  put(out, loading("Replaying…"));
  try {
    const r = await api("POST", `/v1/events/${enc(ev.id)}/replay`, to.value === "one" ? { endpoint_id: endpointId } : {});
    const first = (r.deliveries || [])[0];
    put(out, msg("ok", "Replayed as a new event ", h("a", { href: `#/events/${enc(r.event_id)}`, class: "mono" }, r.event_id),
      first ? [" — ", h("a", { href: `#/deliveries/${enc(first.delivery_id)}` }, "open its delivery")] : "", "."));
  } catch (err) {
    put(out, errorBox(err));
  }
}

export async function viewEvent(ctx, id) {
  viewShell("Event", loading());
  const ev = await api("GET", `/v1/events/${enc(id)}`).catch((err) => {
    if (err instanceof ApiError && err.status === 404) {
      viewShell("Event not found", errorBox(err, "event"), h("p", null, link("Back to the delivery log", "/deliveries")));
      return null;
    }
    throw err;
  });
  if (!ev || ctx.stale()) return;
  if (APP === "console") S.account = ev.account_id;
  // The endpoints its deliveries went to, named as pages name them.
  const endpoints = await endpointsById((ev.deliveries || []).map((d) => d.endpoint_id));
  if (ctx.stale()) return;
  renderTop(parseRoute());
  const out = h("div", { "aria-live": "polite" });
  const ro = readOnly();
  const h1 = main.querySelector("h1");
  h1.textContent = `Event ${ev.type}`;
  setTitle(`Event ${ev.id}`);
  put(main, h1, takeFlash(),
    ro ? null : h("div", { class: "actions toolbar" }, action("Replay", async () => replayDialog(ev, null, out))), out,
    h("section", { class: "card" }, h("h2", null, "What"), dl([
      ["Event id (webhook-id)", h("span", { class: "with-copy" }, mono(ev.id), copyButton(ev.id, "Copy id"))],
      ["Type", mono(ev.type)],
      APP === "console" ? ["Account", mono(ev.account_id)] : null,
      ["Received", when(ev.received_at)],
      ev.idempotency_key ? ["Idempotency key", mono(ev.idempotency_key)] : null,
    ])),
    h("section", { class: "card" }, h("h2", null, "Deliveries"),
      (ev.deliveries || []).length ? deliveriesTable(ev.deliveries, endpoints) : h("p", { class: "empty" }, "No deliveries.")),
    h("section", { class: "card" }, h("h2", null, "Payload"), codeBlock(pretty(ev.payload), { label: "Event payload" })));
}
