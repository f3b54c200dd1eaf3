// herald pages: incidents and the catalog.

import { api, enc, endpointsById } from "./api.js";
import { h, put } from "./dom.js";
import { breakerPill, mono, num, pill, pretty, when } from "./format.js";
import { account, codeBlock, endpointLink, field, href, link, loading, msg, select, table } from "./pieces.js";
import { viewShell } from "./shell.js";
import { APP, RANGE_MS, S, main } from "./state.js";


export async function viewIncidents(ctx) {
  const acc = account();
  const since = ["1h", "24h", "7d"].includes(ctx.q.get("since")) ? ctx.q.get("since") : "24h";
  viewShell("Incidents", loading());
  const params = new URLSearchParams({ since: new Date(Date.now() - RANGE_MS[since]).toISOString() });
  if (APP === "console" && acc) params.set("account_id", acc);
  const [data, eps] = await Promise.all([
    api("GET", `/v1/incidents?${params}`),
    acc ? api("GET", `/v1/accounts/${enc(acc)}/endpoints`).then((r) => r.items || []).catch(() => []) : [],
  ]);
  if (ctx.stale()) return;
  const endpoints = new Map(eps.map((e) => [e.id, e]));
  // All accounts (the console without one): the endpoints named here are read one by one.
  const allAccounts = APP === "console" && !acc;
  if (!acc) {
    const named = [...(data.items || []).map((i) => i.endpoint_id), ...(data.held || []).map((x) => x.endpoint_id)];
    for (const [id, e] of await endpointsById(named.filter((id) => !endpoints.has(id)))) endpoints.set(id, e);
    if (ctx.stale()) return;
  }
  const sel = select([["1h", "Last hour"], ["24h", "Last 24 hours"], ["7d", "Last 7 days"]], since, { id: "inc-since" });
  sel.addEventListener("change", () => { location.hash = href("/incidents", { since: sel.value }); });
  const items = data.items || [];
  const rows = items.map((i) => {
    const ep = i.endpoint_id ? endpoints.get(i.endpoint_id) : null;
    return h("tr", null,
      h("td", null, endpointLink(i.endpoint_id, ep)),
      allAccounts ? h("td", null, ep ? link(ep.account_id, "/incidents", { account_id: ep.account_id }, "mono") : "—") : null,
      h("td", null, pill(i.status)),
      h("td", { class: "num" }, i.http_status ? String(i.http_status) : "—"),
      h("td", { class: "num" }, num(i.deliveries)),
      h("td", { class: "num" }, num(i.pending)),
      h("td", null, when(i.first_at)),
      h("td", null, when(i.last_at)),
      h("td", null, h("span", { class: "examples" }, (i.examples || []).map((x) => h("a", { href: `#/deliveries/${enc(x)}`, class: "mono" }, x)))),
      h("td", null, link("Show in log", "/deliveries", { endpoint_id: i.endpoint_id, status: i.status, range: since === "1h" ? "1h" : since === "7d" ? "7d" : "24h" })));
  });
  const held = data.held || [];
  const waiting = held.reduce((n, x) => n + (x.pending || 0), 0);
  const heldRows = held.map((x) => h("tr", null,
    h("td", null, endpointLink(x.endpoint_id, endpoints.get(x.endpoint_id) || x)),
    allAccounts ? h("td", null, link(x.account_id, "/incidents", { account_id: x.account_id }, "mono")) : null,
    h("td", null, breakerPill(x.breaker.state)),
    h("td", { class: "num" }, num(x.breaker.consecutive_failures)),
    h("td", null, when(x.breaker.next_probe_at, "—")),
    h("td", { class: "num" }, num(x.pending))));
  // Never "nothing to do" when it is not known, or not true.
  const partial = data.complete === false;
  const empty = partial
    ? `No failures among the newest ${num(data.scanned)} deliveries of this period; older ones were not looked at.`
    : held.length ? "No failed deliveries in this period — but the endpoints above are held by their circuit breaker."
      : "No failures in this period — nothing to do.";
  put(main, main.querySelector("h1"),
    h("p", { class: "sub" }, "Failed deliveries grouped by endpoint and by status and HTTP code, largest first. Pending ones are still being retried."),
    APP === "console" ? h("p", { class: "muted" }, acc ? ["Account ", mono(acc)] : "All accounts") : null,
    h("div", { class: "filters narrow" }, field("Period", sel)),
    partial ? msg("info", h("strong", null, "Partial: "), `only the newest ${num(data.scanned)} deliveries of this period were looked at; the counts below leave out older failures.`) : null,
    held.length ? h("section", { class: "card", "aria-labelledby": "inc-held" },
      h("h2", { id: "inc-held" }, `Held by their circuit breaker: ${held.length} ${held.length === 1 ? "endpoint" : "endpoints"}, ${num(waiting)} ${waiting === 1 ? "delivery" : "deliveries"} waiting`),
      h("p", { class: "hint" }, "These endpoints kept failing: nothing is sent to them until the next probe succeeds. Their deliveries wait; none is lost."),
      table(["Endpoint", ...(allAccounts ? ["Account"] : []), "Breaker", "Failures in a row", "Next probe", "Waiting"], heldRows, { caption: "Endpoints held by their circuit breaker" })) : null,
    items.length
      ? table(["Endpoint", ...(allAccounts ? ["Account"] : []), "Status", "HTTP", "Deliveries", "Pending", "First", "Last", "Examples", ""], rows, { caption: "Incidents" })
      : h("p", { class: "empty" }, empty));
}

export async function viewEventTypes(ctx) {
  viewShell("Event types", loading());
  const items = (await api("GET", "/v1/event-types")).items || [];
  S.catalog = items;
  if (ctx.stale()) return;
  if (!items.length) {
    put(main, main.querySelector("h1"),
      h("p", { class: "empty" }, APP === "console" ? "No event types in the catalog yet — declare them under [catalog.events] in herald's config." : "No event types in the catalog yet."));
    return;
  }
  const toc = h("nav", { class: "toc", "aria-label": "Event types" }, h("ul", { class: "chips" }, items.map((t) =>
    h("li", null, h("a", { href: "#/event-types", class: "chip mono", "data-target": `et-${t.type}` }, t.type)))));
  const jump = (e) => {
    const a = e.target.closest("a[data-target]");
    if (!a) return;
    e.preventDefault();
    const el = document.getElementById(a.dataset.target);
    if (el) { el.scrollIntoView(); el.focus({ preventScroll: true }); }
  };
  toc.addEventListener("click", jump);
  const known = new Set(items.map((t) => t.type));
  // A deprecated type says where to go (docs/api.md, "Versioning"): its replacement, linked to
  // its entry on this page.
  const replacement = (t) => {
    if (!t.deprecated) return null;
    const next = t.replaced_by;
    const to = next && known.has(next)
      ? h("a", { href: "#/event-types", class: "mono", "data-target": `et-${next}` }, next)
      : next ? mono(next) : null;
    const p = to
      ? h("p", { class: "deprecation" }, "Deprecated — use ", to, " instead.")
      : h("p", { class: "deprecation" }, "Deprecated — this type will stop being sent; move your endpoints off it.");
    p.addEventListener("click", jump);
    return p;
  };
  put(main, main.querySelector("h1"),
    h("p", { class: "sub" }, "Every event type that may be sent, with its payload schema and a sample."), toc,
    items.map((t) => h("section", { class: "card", id: `et-${t.type}`, tabindex: "-1", "aria-labelledby": `eth-${t.type}` },
      h("h2", { id: `eth-${t.type}`, class: "mono" }, t.type, t.deprecated ? h("span", { class: "pill warn" }, "deprecated") : null),
      replacement(t),
      h("p", null, t.description || h("span", { class: "muted" }, "No description.")),
      t.debounce ? h("p", { class: "hint" }, `Debounced: one event per ${t.debounce.window} per `, mono(t.debounce.key || "key"), ` (${t.debounce.mode}).`) : null,
      h("h3", null, "Sample"),
      t.sample !== null && t.sample !== undefined ? codeBlock(pretty(t.sample), { label: `${t.type} sample` }) : h("p", { class: "muted" }, "No sample."),
      t.schema ? h("details", null, h("summary", null, "Schema (JSON Schema)"), codeBlock(pretty(t.schema), { label: `${t.type} schema` })) : h("p", { class: "muted" }, "No schema."))));
}
