// herald pages: the delivery log.

import { api, catalog, enc } from "./api.js";
import { h, put } from "./dom.js";
import { endpointName, mono, num, pill, waitingText, when } from "./format.js";
import { account, action, button, endpointLink, errorBox, field, href, link, loading, readOnly, select, table } from "./pieces.js";
import { takeFlash, viewShell } from "./shell.js";
import { APP, RANGES, RANGE_MS, STATES, STATUSES, main } from "./state.js";
import { localInput } from "./view-endpoints.js";


export function deliveriesTable(items, endpoints, { endpoint = true, accountCol = false } = {}) {
  const rows = items.map((d) => deliveryRow(d, endpoints, { endpoint, accountCol }));
  const headers = ["Event type", "Status", "Time"];
  if (endpoint) headers.push("Endpoint");
  headers.push("Attempts", "Why waiting");
  if (accountCol) headers.push("Account");
  headers.push("Delivery id");
  return table(headers, rows, { caption: "Deliveries", cls: "log" });
}

// A row of the log: what, how it went, when, where; the whole row opens the delivery (the
// event type is the link keyboard and screen reader users follow).
export function deliveryRow(d, endpoints, { endpoint = true, accountCol = false } = {}) {
  const ep = d.endpoint_id && endpoints ? endpoints.get(d.endpoint_id) : null;
  const to = `#/deliveries/${enc(d.id)}`;
  const tr = h("tr", { class: "row-link", "data-href": to },
    h("td", { class: "type-cell" }, h("a", { href: to, class: "mono" }, d.event_type)),
    h("td", { class: "nowrap" }, pill(d.state), d.last_status && d.last_status !== d.state ? [" ", pill(d.last_status)] : null,
      d.last_http_status ? h("span", { class: "code-num" }, ` ${d.last_http_status}`) : null),
    h("td", { class: "nowrap" }, when(d.created_at)),
    endpoint ? h("td", { class: "ep-cell" }, endpointLink(d.endpoint_id, ep)) : null,
    h("td", { class: "num" }, num(d.attempt_count)),
    h("td", { class: "why-cell" }, d.state === "pending" ? waitingText(d.waiting) : h("span", { class: "muted" }, "—")),
    accountCol ? h("td", null, link(d.account_id, "/deliveries", { account_id: d.account_id }, "mono")) : null,
    h("td", { class: "id-cell" }, mono(d.id, "muted")));
  tr.addEventListener("click", (e) => {
    if (e.target.closest("a, button") || getSelection().toString()) return;
    location.hash = to;
  });
  return tr;
}

export async function viewDeliveries(ctx) {
  const acc = account();
  const q = ctx.q;
  viewShell("Deliveries", loading());
  const [cat, eps] = await Promise.all([
    catalog().catch(() => []),
    acc ? api("GET", `/v1/accounts/${enc(acc)}/endpoints`).then((r) => r.items || []).catch(() => []) : [],
  ]);
  if (ctx.stale()) return;
  const endpoints = new Map(eps.map((e) => [e.id, e]));

  const f = {
    q: q.get("q") || "",
    endpoint_id: q.get("endpoint_id") || "",
    event_type: q.get("event_type") || "",
    state: q.get("state") || "",
    status: q.get("status") || "",
    range: q.get("range") || (q.get("since") || q.get("until") ? "custom" : ""),
    since: q.get("since") || "",
    until: q.get("until") || "",
  };
  const epCtl = acc
    ? select([["", "Any endpoint"], ...eps.map((e) => [e.id, endpointName(e)]),
      ...(f.endpoint_id && !endpoints.has(f.endpoint_id) ? [[f.endpoint_id, f.endpoint_id]] : [])], f.endpoint_id, { id: "flt-endpoint" })
    : h("input", { type: "text", id: "flt-endpoint", class: "mono", value: f.endpoint_id, placeholder: "ep_…", spellcheck: "false" });
  // The catalog's types to pick from; a type outside it (in the address) stays selectable.
  const types = cat.map((t) => t.type);
  if (f.event_type && !types.includes(f.event_type)) types.push(f.event_type);
  const typeCtl = select([["", "Any type"], ...types.map((t) => [t, t])], f.event_type, { id: "flt-type" });
  const stateCtl = select([["", "Any state"], ...STATES.map((s) => [s, s])], f.state, { id: "flt-state" });
  const statusCtl = select([["", "Any status"], ...STATUSES.map((s) => [s, s])], f.status, { id: "flt-status" });
  const rangeCtl = select(RANGES, f.range, { id: "flt-range" });
  const toIso = (v) => { const t = new Date(v); return v && !Number.isNaN(t.getTime()) ? t.toISOString() : ""; };
  const fromCtl = h("input", { type: "datetime-local", id: "flt-from", step: "1", value: f.since ? localInput(Date.parse(f.since)) : "" });
  const toCtl = h("input", { type: "datetime-local", id: "flt-to", step: "1", value: f.until ? localInput(Date.parse(f.until)) : "" });
  const custom = h("div", { class: "custom-range", hidden: f.range !== "custom" },
    field("From", fromCtl), field("To", toCtl));
  // One box for an event id, a delivery id or a text in the payload (the API's `q`).
  const searchCtl = h("input", { type: "search", id: "flt-q", class: "mono", value: f.q, maxlength: "200",
    spellcheck: "false", autocomplete: "off", placeholder: "evt_…, dlv_… or text in the payload" });
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter deliveries" },
    h("div", { class: "search-field" }, field("Search", searchCtl, "An event id, a delivery id, or a text the payload holds (case matters).")),
    field("Endpoint", epCtl), field("Event type", typeCtl), field("State", stateCtl), field("Status", statusCtl),
    field("Time range", rangeCtl), custom,
    h("div", { class: "filter-actions" }, button("Apply", null, { type: "submit", kind: "small" }), button("Clear", () => {
      location.hash = href("/deliveries");
    }, { kind: "small" }), button("Refresh", () => load(current()), { kind: "small" })));
  const results = h("div", { class: "results", "aria-live": "polite" });

  const current = () => {
    const r = rangeCtl.value;
    return {
      q: searchCtl.value.trim(),
      endpoint_id: epCtl.value.trim(), event_type: typeCtl.value, state: stateCtl.value, status: statusCtl.value, range: r,
      since: r === "custom" ? toIso(fromCtl.value) : "", until: r === "custom" ? toIso(toCtl.value) : "",
    };
  };
  const apply = () => {
    const c = current();
    custom.hidden = c.range !== "custom";
    // The filters live in the address: a filtered log can be shared and reloaded.
    history.replaceState(null, "", `${location.pathname}${location.search}${href("/deliveries", { ...c, limit: q.get("limit") })}`);
    load(c);
  };
  form.addEventListener("submit", (e) => { e.preventDefault(); apply(); });
  for (const el of [epCtl, typeCtl, stateCtl, statusCtl, rangeCtl, fromCtl, toCtl]) el.addEventListener("change", apply);
  // The search goes on Enter (the form's submit), and when the box is cleared.
  searchCtl.addEventListener("search", () => { if (!searchCtl.value) apply(); });

  let loadGen = 0;
  async function load(c) {
    const my = ++loadGen;
    const params = new URLSearchParams();
    if (APP === "console" && acc) params.set("account_id", acc);
    for (const k of ["q", "endpoint_id", "event_type", "state", "status"]) if (c[k]) params.set(k, c[k]);
    if (RANGE_MS[c.range]) params.set("since", new Date(Date.now() - RANGE_MS[c.range]).toISOString());
    if (c.range === "custom") {
      if (c.since) params.set("since", c.since);
      if (c.until) params.set("until", c.until);
    }
    // A page is 50 rows; ?limit= in the address asks for another size (1 to 500).
    const limit = Number(q.get("limit"));
    params.set("limit", String(Number.isInteger(limit) && limit >= 1 && limit <= 500 ? limit : 50));
    put(results, loading());
    const narrowed = ["endpoint_id", "event_type", "state", "status", "range"].some((k) => c[k]);
    const filtered = narrowed || !!c.q;
    let page;
    try {
      page = await api("GET", `/v1/deliveries?${params}`);
    } catch (err) {
      if (my === loadGen && !ctx.stale()) put(results, errorBox(err));
      return;
    }
    if (my !== loadGen || ctx.stale()) return;
    const items = page.items || [];
    if (!items.length && !page.next_cursor) {
      put(results, h("p", { class: "empty" }, c.q
        ? `Nothing found for “${c.q}”${narrowed ? " with these filters" : ""} — check the id, or search a shorter text (case matters).`
        : filtered
          ? "No deliveries match these filters — widen the time range or clear a filter."
          : ["No deliveries yet — ", eps.length || !acc ? "send a test event from an endpoint's page." : readOnly() ? "no endpoint is set up." : link("Create endpoint", "/endpoints/new"), eps.length || !acc ? "" : " first, then send a test event."]));
      return;
    }
    const t = deliveriesTable(items, endpoints, { accountCol: APP === "console" && !acc });
    const tbody = t.querySelector("tbody");
    const count = h("p", { class: "muted count" });
    let shown = items.length;
    // A text search reads at most the newest 10,000 events a page: it says so, and goes on
    // through older ones only when asked.
    const setCount = (more, limited) => {
      count.textContent = `${shown} ${shown === 1 ? "delivery" : "deliveries"} ${c.q ? "found" : "shown"}` + (limited
        ? " so far — a search looks at 10,000 events at a time, newest first"
        : more ? " — newest first; more below" : "");
    };
    setCount(!!page.next_cursor, page.search_limited);
    const pager = h("div", { class: "pager" });
    let cursor = page.next_cursor;
    const moreButton = (limited) => action(limited ? "Search older events" : "Load more", async () => {
      params.set("cursor", cursor);
      try {
        const next = await api("GET", `/v1/deliveries?${params}`);
        if (my !== loadGen || ctx.stale()) return;
        for (const d of next.items || []) tbody.append(deliveryRow(d, endpoints, { accountCol: APP === "console" && !acc }));
        shown += (next.items || []).length;
        t.hidden = !shown;
        cursor = next.next_cursor;
        setCount(!!cursor, next.search_limited);
        put(pager, cursor ? moreButton(next.search_limited) : h("p", { class: "muted" }, "That is all."));
      } catch (err) {
        put(pager, errorBox(err), moreButton(limited));
      }
    });
    t.hidden = !shown;
    if (cursor) pager.append(moreButton(page.search_limited));
    put(results, count, t, pager);
  }

  put(main, main.querySelector("h1"), takeFlash(),
    APP === "console" ? h("p", { class: "muted" }, acc ? ["Account ", mono(acc)] : "All accounts — pick one in the Account box to filter by endpoint.") : null,
    form, results);
  await load(f);
}
