// herald pages: the shell: header, nav, the view for the route; sign-in (console), link handling
// (portal), expiry.

import { ApiError, api, onUnauthorized } from "./api.js";
import { append, h, put } from "./dom.js";
import { mono, utc } from "./format.js";
import { button, errorBox, field, href, link, loading, msg } from "./pieces.js";
import { APP, BRAND_KEY, FRAMED, S, TOKEN_KEY, kept, main, top } from "./state.js";
import { viewAlerts } from "./view-alerts.js";
import { viewEventTypes, viewIncidents } from "./view-catalog.js";
import { viewDeliveries } from "./view-deliveries.js";
import { viewDelivery, viewEvent } from "./view-delivery.js";
import { viewEndpointForm } from "./view-endpoint-form.js";
import { viewEndpoint, viewEndpoints } from "./view-endpoints.js";
import { viewAccounts, viewOverview } from "./view-overview.js";


export function navItems() {
  const items = [];
  if (APP === "console") items.push(["overview", "Overview"], ["accounts", "Accounts"]);
  items.push(["endpoints", "Endpoints"], ["deliveries", "Deliveries"], ["incidents", "Incidents"], ["event-types", "Event types"], ["alerts", "Alerts"]);
  return items;
}

export function section(parts) {
  const p = parts[0] || "";
  if (p === "events") return "deliveries";
  return p;
}

// The portal's look (README.md, "Branding"): the brand and the logo from /v1/session (kept
// for the pages shown without a session), set as text and as an <img>, never as markup. The
// console is herald's own.
export function look() {
  if (APP === "console") return { brand: "herald", logo: false };
  if (S.session && typeof S.session.brand === "string") return { brand: S.session.brand, logo: !!S.session.logo };
  try {
    const last = JSON.parse(kept.get(BRAND_KEY) || "null");
    if (last && typeof last.brand === "string") return { brand: last.brand, logo: !!last.logo };
  } catch (_) { /* nothing kept */ }
  return { brand: null, logo: false };
}

function keepLook(session) {
  if (APP !== "portal" || typeof session.brand !== "string") return;
  kept.set(BRAND_KEY, JSON.stringify({ brand: session.brand, logo: !!session.logo }));
  const icon = document.querySelector('link[rel="icon"]');
  if (icon && session.logo) icon.href = "/assets/logo";
}

// The brand's mark and name: the logo (with alt text) or herald's diamond, then the name.
export function brandMark(linkTo) {
  const { brand, logo } = look();
  const mark = logo
    ? h("img", { class: "brand-logo", src: "/assets/logo", alt: `${brand} logo` })
    : h("span", { class: "logo", "aria-hidden": "true" }, "◆");
  const kids = brand === null ? ["Webhooks"] : [mark, brand];
  return linkTo ? h("a", { class: "brand", href: linkTo }, kids) : h("span", { class: "brand" }, kids);
}

// A header with only the brand (pages without a session); framed, none at all.
export function plainTop(...more) {
  if (FRAMED && APP === "portal") put(top);
  else put(top, h("div", { class: "bar" }, brandMark(null), ...more));
  top.hidden = FRAMED && APP === "portal";
}

export function renderTop(route) {
  const current = section(route.parts);
  const nav = h("nav", { class: "nav", "aria-label": "Main" },
    h("ul", null, navItems().map(([p, t]) => h("li", null,
      h("a", { href: href(`/${p}`), "aria-current": p === current ? "page" : null }, t)))));
  top.hidden = false;
  if (FRAMED && APP === "portal") {
    // The host page is the header: only the nav.
    put(top, nav);
    return;
  }
  const brand = brandMark(APP === "console" ? "#/overview" : "#/endpoints");
  let who;
  const tools = h("div", { class: "tools" });
  if (APP === "portal") {
    who = h("span", { class: "who", title: `This session ends ${utc(S.session.expires_at)}` }, "Webhooks · account ", mono(S.session.account_id));
    if (S.session.read_only) append(tools, [h("span", { class: "pill warn" }, "read-only")]);
  } else {
    who = h("span", { class: "who" }, "console");
    append(tools, [accountPicker(route), button("Sign out", signOut, { kind: "small" })]);
  }
  put(top, h("div", { class: "bar" }, brand, who, tools), nav);
}

export function accountPicker(route) {
  const listId = "accounts-list";
  const input = h("input", { type: "text", id: "account-pick", list: listId, value: S.account || "",
    placeholder: "account id", autocomplete: "off", spellcheck: "false", class: "mono" });
  const dlist = h("datalist", { id: listId }, (S.accounts || []).map((a) => h("option", { value: a.account_id })));
  const form = h("form", { class: "picker", role: "search", "aria-label": "Account" },
    h("label", { for: input.id }, "Account"), input, dlist, button("Open", null, { type: "submit", kind: "small" }));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const a = input.value.trim();
    if (!a) return;
    let p = section(route.parts);
    if (!["endpoints", "deliveries", "incidents", "alerts"].includes(p) || route.parts.length > 1) p = "endpoints";
    location.hash = href(`/${p}`, { account_id: a });
  });
  return form;
}

export function parseRoute() {
  let raw = location.hash.replace(/^#/, "");
  if (!raw.startsWith("/")) raw = `/${raw}`;
  const qi = raw.indexOf("?");
  const path = qi >= 0 ? raw.slice(0, qi) : raw;
  const q = new URLSearchParams(qi >= 0 ? raw.slice(qi + 1) : "");
  let parts;
  try {
    parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  } catch (_) {
    parts = ["?"];
  }
  return { parts, q };
}

export function setTitle(t) {
  const { brand } = look();
  document.title = APP === "console" ? `${t} — herald console` : `${t} — ${brand === null ? "" : `${brand} `}webhooks`;
}

// A section's own page, framed in the host's page: its heading would repeat the current nav
// item under the host's own heading, so it is there for screen readers only.
export function viewShell(title, ...kids) {
  setTitle(title);
  const repeatsNav = FRAMED && APP === "portal" && navItems().some(([, t]) => t === title);
  const h1 = h("h1", { tabindex: "-1", class: repeatsNav ? "sr-only" : null }, title);
  put(main, h1, takeFlash(), ...kids);
  return h1;
}

// The message of the action that led to this view (render() takes it once; the loading and
// the loaded states of the view both show it).
export function takeFlash() {
  const f = S.shown;
  if (!f) return null;
  const m = msg(f.kind, ...f.kids.map((k) => (k instanceof Node ? k.cloneNode(true) : k)));
  m.dataset.flash = "";
  m.tabIndex = -1;
  return m;
}

export let lastPath = null;
export async function render() {
  const gen = ++S.gen;
  S.shown = S.flash;
  S.flash = null;
  // The action that draws the page again, if one does: focus goes back to it at the end.
  const refocus = S.refocus;
  S.refocus = null;
  const route = parseRoute();
  const { parts, q } = route;
  if (APP === "console") {
    if (q.has("account_id")) S.account = q.get("account_id");
    else if (["endpoints", "deliveries", "incidents", "alerts"].includes(parts[0]) && parts.length === 1) S.account = null;
  }
  renderTop(route);
  const pathKey = parts.join("/");
  const moved = lastPath !== null && lastPath !== pathKey;
  lastPath = pathKey;
  const ctx = { gen, q, parts, stale: () => gen !== S.gen };
  const [p0, p1, p2] = parts;
  try {
    if (!p0) {
      location.replace(APP === "console" ? "#/overview" : "#/endpoints");
      return;
    }
    if (APP === "console" && p0 === "overview" && !p1) await viewOverview(ctx);
    else if (APP === "console" && p0 === "accounts" && !p1) await viewAccounts(ctx);
    else if (p0 === "endpoints" && !p1) await viewEndpoints(ctx);
    else if (p0 === "endpoints" && p1 === "new" && !p2) await viewEndpointForm(ctx, null);
    else if (p0 === "endpoints" && p1 && p2 === "edit") await viewEndpointForm(ctx, p1);
    else if (p0 === "endpoints" && p1 && !p2) await viewEndpoint(ctx, p1);
    else if (p0 === "deliveries" && !p1) await viewDeliveries(ctx);
    else if (p0 === "deliveries" && p1 && !p2) await viewDelivery(ctx, p1);
    else if (p0 === "events" && p1 && !p2) await viewEvent(ctx, p1);
    else if (p0 === "incidents" && !p1) await viewIncidents(ctx);
    else if (p0 === "event-types" && !p1) await viewEventTypes(ctx);
    else if (p0 === "alerts" && !p1) await viewAlerts(ctx);
    else {
      viewShell("Page not found", h("p", null, "There is no page at this address. ",
        link(APP === "console" ? "Go to the overview" : "Go to your endpoints", APP === "console" ? "/overview" : "/endpoints"), "."));
    }
  } catch (err) {
    if (ctx.stale()) return;
    const what = { endpoints: "endpoint", deliveries: "delivery", events: "event" }[p0];
    const h1 = main.querySelector("h1");
    if (h1 && err instanceof ApiError && err.status === 404 && p1) h1.textContent = `${what ? what[0].toUpperCase() + what.slice(1) : "Page"} not found`;
    put(main, h1, errorBox(err, p1 ? what : null));
  }
  if (moved && !ctx.stale()) {
    const h1 = main.querySelector("h1");
    if (h1 && !main.contains(document.activeElement)) h1.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  } else if (refocus && !ctx.stale() && !main.contains(document.activeElement)) {
    // Drawn again after an action: the message that answers it, else its button.
    const to = main.querySelector("[data-flash]")
      || [...main.querySelectorAll("button")].find((x) => x.textContent === refocus);
    if (to) to.focus({ preventScroll: true });
  }
}

// ---------------------------------------------------------------------------------------
// Sign-in (console), link handling (portal), expiry.

export function unauthorized() {
  S.gen++;
  kept.remove(TOKEN_KEY);
  S.token = null;
  if (APP === "console") {
    signIn("herald refused the admin token (401). Type it again.");
  } else {
    expired();
  }
}

export function expired() {
  plainTop();
  setTitle("Link expired");
  put(main, h("h1", null, "This link has expired"),
    h("p", null, "Portal links last a limited time and can be revoked. Open the webhooks page again from your account to get a new link."));
}

export function signOut() {
  kept.remove(TOKEN_KEY);
  S.token = null;
  S.session = null;
  S.gen++;
  signIn(null);
}

export function signIn(notice) {
  plainTop(h("span", { class: "who" }, "console"));
  setTitle("Sign in");
  const input = h("input", { type: "password", id: "admin-token", name: "token", autocomplete: "current-password", required: true, spellcheck: "false" });
  const out = h("div", { "aria-live": "polite" });
  const submit = button("Sign in", null, { type: "submit", kind: "primary" });
  const form = h("form", { class: "card signin" },
    field("Admin token", input, "One of server.admin_tokens, or the token herald wrote to its data directory. Kept in this browser tab only."),
    h("div", { class: "actions" }, submit), out);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    submit.disabled = true;
    put(out, loading("Checking the token…"));
    try {
      const s = await api("GET", "/v1/session", undefined, token);
      if (!s || s.role !== "admin") {
        put(out, msg("error", "This token is not an admin token. The console needs one of server.admin_tokens."));
        return;
      }
      kept.set(TOKEN_KEY, token);
      S.token = token;
      S.session = s;
      await start();
    } catch (err) {
      put(out, err.status === 401 ? msg("error", "herald does not know this token (401).") : errorBox(err));
    } finally {
      submit.disabled = false;
    }
  });
  put(main, h("h1", null, "herald console"), notice ? msg("error", notice) : null, form);
  input.focus();
}

export async function start() {
  put(main, loading());
  if (APP === "console") {
    try {
      S.accounts = (await api("GET", "/v1/accounts")).items || [];
    } catch (err) {
      if (err.status === 401) return;
      S.accounts = [];
    }
  }
  started = true;
  render();
}
export let started = false;

// A portal link's token in the address: #token=hps_...
function linkToken() {
  const m = APP === "portal" ? location.hash.match(/^#token=([^&]+)/) : null;
  return m ? decodeURIComponent(m[1]) : null;
}

// A new portal link opened in this tab or frame while a session is shown (the host app
// refreshed its embedded link): it replaces the session at once, nothing of the old one kept.
function onHashChange() {
  if (linkToken()) {
    S.gen++;
    Object.assign(S, { token: null, session: null, catalog: null, flash: null, shown: null });
    lastPath = null;
    put(main, loading());
    boot();
    return;
  }
  if (started) render();
}
let listening = false;
let boots = 0; // an older boot's late answer must not undo a newer link's

export async function boot() {
  const mine = ++boots;
  if (!listening) {
    listening = true;
    window.addEventListener("hashchange", onHashChange);
    onUnauthorized(unauthorized);
  }
  const token = linkToken();
  if (token) {
    kept.set(TOKEN_KEY, token);
    kept.remove(BRAND_KEY);
    // The token leaves the address bar (and so the history, bookmarks and screen shares).
    history.replaceState(null, "", `${location.pathname}${location.search}#/endpoints`);
  }
  S.token = kept.get(TOKEN_KEY);
  if (!S.token) {
    if (APP === "console") signIn(null);
    else {
      plainTop();
      setTitle("Webhooks");
      put(main, h("h1", null, "Open this page from your account"),
        h("p", null, "This page needs a portal link (it ends in #token=…). Open the webhooks page from your account's settings to get one."));
    }
    return;
  }
  try {
    const s = await api("GET", "/v1/session", undefined, S.token);
    if (mine !== boots) return;
    if (APP === "portal" && s.role !== "portal") {
      put(main, h("h1", null, "Not a portal link"), h("p", null, "This token is not a portal session. Operators use ", h("a", { href: "/console" }, "the console"), "."));
      return;
    }
    if (APP === "console" && s.role !== "admin") {
      kept.remove(TOKEN_KEY);
      signIn("The saved token is not an admin token.");
      return;
    }
    S.session = s;
    keepLook(s);
  } catch (err) {
    if (mine !== boots) return;
    if (err.status === 401) {
      kept.remove(TOKEN_KEY);
      S.token = null;
      if (APP === "console") signIn("herald refused the saved admin token (401). Type it again.");
      else expired();
      return;
    }
    put(main, h("h1", null, APP === "console" ? "herald is not answering" : "The webhooks page is not answering"), errorBox(err),
      button("Try again", () => boot(), { kind: "primary" }));
    return;
  }
  await start();
}
