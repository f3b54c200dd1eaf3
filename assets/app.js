/* herald pages: the portal (a customer's webhooks, one account) and the console (the operator).
 *
 * One script for both pages (<body data-app="portal|console">), no framework, no build step.
 * The pages hold no data: everything comes from herald's JSON API with the token kept in
 * sessionStorage. Rules kept throughout:
 * - data is always text: textContent / createTextNode, never innerHTML (payloads, headers and
 *   response bodies are shown as the characters they are);
 * - no inline style or script (the CSP forbids them): looks come from classes in app.css, and
 *   the charts are SVG built with attributes;
 * - every view has its own hash URL (#/deliveries/dlv_...), so it can be shared and reloaded.
 */
"use strict";

(() => {
  const APP = document.body.dataset.app === "console" ? "console" : "portal";
  const TOKEN_KEY = `herald.${APP}.token`;
  const top = document.getElementById("top");
  const main = document.getElementById("app");

  const STATES = ["pending", "delivered", "failed", "skipped"];
  const STATUSES = [
    "delivered", "http_error", "timeout", "connection_error", "tls_error", "blocked",
    "rate_limited", "debounced", "paused", "disabled", "unverified", "not_entitled", "no_endpoint",
  ];
  const SENT_FAILURES = ["http_error", "timeout", "connection_error", "tls_error", "blocked"];
  const RANGES = [
    ["", "Any time"], ["15m", "Last 15 minutes"], ["1h", "Last hour"],
    ["24h", "Last 24 hours"], ["7d", "Last 7 days"], ["custom", "Custom…"],
  ];
  const RANGE_MS = { "15m": 15 * 60e3, "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3 };

  const S = {
    token: null,
    session: null,
    gen: 0, // bumped on every render: late answers of an old view are dropped
    account: null, // the account the console is looking at (the portal's is its session's)
    catalog: null,
    flash: null, // a message for the next render (after an action that navigates)
    shown: null, // the message the current render shows
    accounts: null,
  };

  // ---------------------------------------------------------------------------------------
  // DOM helpers: text is always text.

  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    setProps(el, props);
    append(el, kids);
    return el;
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined) el.setAttribute(k, String(v));
    }
    append(el, kids);
    return el;
  }

  function setProps(el, props) {
    if (!props) return;
    for (const [k, v] of Object.entries(props)) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") {
        el.addEventListener(k.slice(2), v);
      } else if (k === "value" || k === "checked" || k === "selected" || k === "disabled") {
        el[k] = v;
      } else if (v === true) {
        el.setAttribute(k, "");
      } else {
        el.setAttribute(k, String(v));
      }
    }
  }

  function append(el, kids) {
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
  }

  // Replaces an element's children (nulls and false skipped, arrays flattened).
  function put(el, ...kids) {
    el.replaceChildren();
    append(el, kids);
    return el;
  }

  let uid = 0;
  const nextId = (p) => `${p}-${++uid}`;

  // ---------------------------------------------------------------------------------------
  // Formatting.

  function utc(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return d.toISOString().replace("T", " ").replace(".000Z", "Z").replace("Z", " UTC");
  }

  function relText(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return String(iso);
    const s = Math.round((Date.now() - t) / 1000);
    const a = Math.abs(s);
    let text;
    if (a < 10) return s >= 0 ? "just now" : "in a moment";
    if (a < 60) text = `${a} s`;
    else if (a < 3600) text = `${Math.round(a / 60)} min`;
    else if (a < 86400 * 2) text = `${Math.round(a / 3600)} h`;
    else text = `${Math.round(a / 86400)} days`;
    return s >= 0 ? `${text} ago` : `in ${text}`;
  }

  function when(iso, empty = "—") {
    if (!iso) return h("span", { class: "muted" }, empty);
    return h("time", { datetime: iso, title: utc(iso), "data-rel": "" }, relText(iso));
  }

  setInterval(() => {
    for (const t of document.querySelectorAll("time[data-rel]")) t.textContent = relText(t.dateTime);
  }, 20000);

  function bytes(n) {
    if (typeof n !== "number") return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    let v = n;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return `${v >= 10 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
  }

  function duration(sec) {
    if (typeof sec !== "number") return "—";
    const d = Math.floor(sec / 86400), hh = Math.floor((sec % 86400) / 3600), m = Math.floor((sec % 3600) / 60);
    if (d) return `${d} d ${hh} h`;
    if (hh) return `${hh} h ${m} min`;
    if (m) return `${m} min ${sec % 60} s`;
    return `${sec} s`;
  }

  function age(iso) {
    if (!iso) return "—";
    return duration(Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000)));
  }

  const pct = (x) => (typeof x === "number" ? `${Math.round(x * 1000) / 10}%` : "—");
  const num = (n) => (typeof n === "number" ? n.toLocaleString("en") : "—");

  function kindOf(s) {
    switch (s) {
      case "delivered": case "active": case "closed": return "ok";
      case "failed": case "http_error": case "timeout": case "connection_error": case "tls_error":
      case "blocked": case "disabled": case "open": return "bad";
      case "paused": case "rate_limited": case "half_open": case "unverified": return "warn";
      case "pending": return "info";
      default: return "muted";
    }
  }

  const pill = (s, kind) => (s ? h("span", { class: `pill ${kind || kindOf(s)}` }, s) : h("span", { class: "muted" }, "—"));
  const mono = (t, cls = "") => h("code", { class: `mono ${cls}`.trim() }, t);

  function shortUrl(u) {
    try {
      const x = new URL(u);
      return x.host + (x.pathname === "/" ? "" : x.pathname);
    } catch (_) {
      return u;
    }
  }

  // JSON with numbers kept as written (big integers, 1.50) where the browser can: the payload
  // shown is the payload herald stored.
  function parseJSON(text) {
    if (typeof JSON.rawJSON === "function") {
      // Only integers past 2^53 are kept as written (herald's own numbers never are).
      return JSON.parse(text, (k, v, ctx) =>
        typeof v === "number" && !Number.isSafeInteger(v) && ctx && typeof ctx.source === "string" && /^-?\d+$/.test(ctx.source)
          ? JSON.rawJSON(ctx.source)
          : v);
    }
    return JSON.parse(text);
  }
  const pretty = (v) => JSON.stringify(v, null, 2);

  // ---------------------------------------------------------------------------------------
  // The API.

  class ApiError extends Error {
    constructor(status, code, message, field) {
      super(message);
      this.status = status;
      this.code = code;
      this.field = field || null;
    }
  }

  async function api(method, path, body, token) {
    const headers = { Authorization: `Bearer ${token || S.token}`, Accept: "application/json" };
    const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (_) {
      throw new ApiError(0, "network", "herald did not answer. Check the connection and try again.");
    }
    const text = await resp.text();
    let data = null;
    if (text) {
      try { data = parseJSON(text); } catch (_) { data = null; }
    }
    if (!resp.ok) {
      const e = (data && data.error) || {};
      const err = new ApiError(resp.status, e.code || `http_${resp.status}`,
        e.message || `herald answered ${resp.status}`, e.field);
      if (resp.status === 401 && !token) unauthorized();
      throw err;
    }
    return data;
  }

  const enc = encodeURIComponent;

  async function catalog() {
    if (!S.catalog) S.catalog = (await api("GET", "/v1/event-types")).items || [];
    return S.catalog;
  }

  // ---------------------------------------------------------------------------------------
  // Pieces of the pages.

  function loading(text = "Loading…") {
    return h("p", { class: "loading", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }), text);
  }

  function errorBox(err, what) {
    const box = h("div", { class: "msg error", role: "alert" });
    if (err instanceof ApiError && err.status === 404) {
      append(box, [h("strong", null, "Not found. "), err.message,
        what ? ` — no ${what} with this id in ${APP === "portal" ? "your account" : "herald"}.` : "."]);
    } else if (err instanceof ApiError) {
      append(box, [h("strong", null, err.status ? `Error ${err.status}: ` : "Error: "), err.message]);
      if (err.field) append(box, [" ", h("span", { class: "field" }, "Field: ", mono(err.field))]);
    } else {
      append(box, [h("strong", null, "Error: "), String(err && err.message ? err.message : err)]);
      console.error(err);
    }
    return box;
  }

  function msg(kind, ...kids) {
    return h("div", { class: `msg ${kind}`, role: kind === "error" ? "alert" : "status" }, ...kids);
  }

  function copyButton(getText, label = "Copy") {
    const b = h("button", { type: "button", class: "btn small copy", "aria-label": label === "Copy" ? undefined : label });
    b.textContent = label;
    b.addEventListener("click", async () => {
      const text = typeof getText === "function" ? getText() : getText;
      let ok = false;
      try {
        if (navigator.clipboard && window.isSecureContext) {
          await navigator.clipboard.writeText(text);
          ok = true;
        }
      } catch (_) { ok = false; }
      if (!ok) {
        // Plain-HTTP herald: no async clipboard; copy through a selected, off-screen field.
        const ta = h("textarea", { class: "offscreen", readonly: true, "aria-hidden": "true" });
        ta.value = text;
        document.body.append(ta);
        ta.select();
        try { ok = document.execCommand("copy"); } catch (_) { ok = false; }
        ta.remove();
        b.focus();
      }
      b.textContent = ok ? "Copied" : "Select and copy by hand";
      setTimeout(() => { b.textContent = label; }, 2000);
    });
    return b;
  }

  function codeBlock(text, { copy = true, label } = {}) {
    const pre = h("pre", { class: "code", tabindex: "0", "aria-label": label }, text);
    return h("div", { class: "codebox" }, copy ? h("div", { class: "codebar" }, copyButton(() => text, "Copy")) : null, pre);
  }

  function secretBox(title, value, note) {
    return h("div", { class: "secret", role: "status" },
      h("h3", null, title),
      h("div", { class: "secret-row" }, h("code", { class: "mono secret-value" }, value), copyButton(value, "Copy")),
      h("p", { class: "once" }, note));
  }

  function table(headers, rows, { caption, cls = "" } = {}) {
    // A column of numbers is right-aligned, its header too.
    const first = rows.find((r) => r && r.tagName === "TR");
    const numeric = (i) => first && first.cells[i] && first.cells[i].classList.contains("num");
    return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption || "table" },
      h("table", { class: cls },
        caption ? h("caption", { class: "sr-only" }, caption) : null,
        h("thead", null, h("tr", null, headers.map((c, i) => h("th", { scope: "col", class: numeric(i) ? "num" : null }, c)))),
        h("tbody", null, rows)));
  }

  function dl(pairs) {
    return h("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => h("div", null, h("dt", null, k), h("dd", null, v))));
  }

  function button(text, onclick, { kind = "", disabled = false, type = "button" } = {}) {
    return h("button", { type, class: `btn ${kind}`.trim(), onclick, disabled }, text);
  }

  // A button that runs an async action once at a time, showing it is busy.
  function action(text, fn, opts = {}) {
    const b = button(text, null, opts);
    b.addEventListener("click", async () => {
      if (b.getAttribute("aria-busy") === "true") return;
      b.setAttribute("aria-busy", "true");
      b.classList.add("busy");
      try { await fn(b); } finally {
        b.removeAttribute("aria-busy");
        b.classList.remove("busy");
      }
    });
    return b;
  }

  // A modal confirmation (a <dialog>, not window.confirm): resolves true when confirmed.
  function confirmDialog(title, body, confirmText, { danger = false } = {}) {
    return new Promise((resolve) => {
      const hid = nextId("dlg");
      const ok = button(confirmText, () => d.close("ok"), { kind: danger ? "danger" : "primary" });
      const cancel = button("Cancel", () => d.close("cancel"));
      const d = h("dialog", { class: "dialog", "aria-labelledby": hid },
        h("h2", { id: hid }, title),
        h("div", { class: "dialog-body" }, body),
        h("div", { class: "actions" }, ok, cancel));
      d.addEventListener("close", () => {
        resolve(d.returnValue === "ok");
        d.remove();
      });
      document.body.append(d);
      d.showModal();
      (danger ? cancel : ok).focus();
    });
  }

  function field(labelText, control, hint) {
    const id = control.id || nextId("f");
    control.id = id;
    const hintEl = hint ? h("p", { class: "hint", id: `${id}-hint` }, hint) : null;
    if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
    return h("div", { class: "field" }, h("label", { for: id }, labelText), control, hintEl);
  }

  function select(options, value, props = {}) {
    return h("select", props, options.map(([v, t]) => h("option", { value: v, selected: v === (value || "") }, t)));
  }

  const readOnly = () => APP === "portal" && S.session && S.session.read_only;
  const account = () => (APP === "portal" ? S.session && S.session.account_id : S.account);

  // A hash link; in the console the lists carry the account they show.
  function href(path, params = {}) {
    const q = new URLSearchParams();
    if (APP === "console" && S.account && params.account_id === undefined &&
      /^\/(endpoints|deliveries|incidents)(\/new)?$/.test(path)) q.set("account_id", S.account);
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
    const qs = q.toString();
    return `#${path}${qs ? `?${qs}` : ""}`;
  }

  const link = (text, path, params, cls) => h("a", { href: href(path, params), class: cls }, text);

  function endpointLink(id, url) {
    if (!id) return h("span", { class: "muted" }, "none");
    return h("a", { href: `#/endpoints/${enc(id)}`, class: "mono", title: url || id }, url ? shortUrl(url) : id);
  }

  // ---------------------------------------------------------------------------------------
  // The shell: header, nav, the view.

  function navItems() {
    const items = [];
    if (APP === "console") items.push(["overview", "Overview"], ["accounts", "Accounts"]);
    items.push(["endpoints", "Endpoints"], ["deliveries", "Deliveries"], ["incidents", "Incidents"], ["event-types", "Event types"]);
    return items;
  }

  function section(parts) {
    const p = parts[0] || "";
    if (p === "events") return "deliveries";
    return p;
  }

  function renderTop(route) {
    const current = section(route.parts);
    const nav = h("nav", { class: "nav", "aria-label": "Main" },
      h("ul", null, navItems().map(([p, t]) => h("li", null,
        h("a", { href: href(`/${p}`), "aria-current": p === current ? "page" : null }, t)))));
    const brand = h("a", { class: "brand", href: APP === "console" ? "#/overview" : "#/endpoints" },
      h("span", { class: "logo", "aria-hidden": "true" }, "◆"), "herald");
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

  function accountPicker(route) {
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
      if (!["endpoints", "deliveries", "incidents"].includes(p) || route.parts.length > 1) p = "endpoints";
      location.hash = href(`/${p}`, { account_id: a });
    });
    return form;
  }

  function parseRoute() {
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

  function setTitle(t) {
    document.title = `${t} — herald ${APP === "console" ? "console" : "webhooks"}`;
  }

  function viewShell(title, ...kids) {
    setTitle(title);
    const h1 = h("h1", { tabindex: "-1" }, title);
    put(main, h1, takeFlash(), ...kids);
    return h1;
  }

  // The message of the action that led to this view (render() takes it once; the loading and
  // the loaded states of the view both show it).
  function takeFlash() {
    const f = S.shown;
    return f ? msg(f.kind, ...f.kids.map((k) => (k instanceof Node ? k.cloneNode(true) : k))) : null;
  }

  let lastPath = null;
  async function render() {
    const gen = ++S.gen;
    S.shown = S.flash;
    S.flash = null;
    const route = parseRoute();
    const { parts, q } = route;
    if (APP === "console") {
      if (q.has("account_id")) S.account = q.get("account_id");
      else if (["endpoints", "deliveries", "incidents"].includes(parts[0]) && parts.length === 1) S.account = null;
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
    }
  }

  // ---------------------------------------------------------------------------------------
  // Sign-in (console), link handling (portal), expiry.

  function unauthorized() {
    S.gen++;
    sessionStorage.removeItem(TOKEN_KEY);
    S.token = null;
    if (APP === "console") {
      signIn("herald refused the admin token (401). Type it again.");
    } else {
      expired();
    }
  }

  function expired() {
    put(top, h("div", { class: "bar" }, h("span", { class: "brand" }, h("span", { class: "logo", "aria-hidden": "true" }, "◆"), "herald")));
    setTitle("Link expired");
    put(main, h("h1", null, "This link has expired"),
      h("p", null, "Portal links last a limited time and can be revoked. Open the webhooks page again from your account to get a new link."));
  }

  function signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
    S.token = null;
    S.session = null;
    S.gen++;
    signIn(null);
  }

  function signIn(notice) {
    put(top, h("div", { class: "bar" }, h("span", { class: "brand" }, h("span", { class: "logo", "aria-hidden": "true" }, "◆"), "herald"), h("span", { class: "who" }, "console")));
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
        sessionStorage.setItem(TOKEN_KEY, token);
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

  async function start() {
    put(main, loading());
    if (APP === "console") {
      try {
        S.accounts = (await api("GET", "/v1/accounts")).items || [];
      } catch (err) {
        if (err.status === 401) return;
        S.accounts = [];
      }
    }
    if (!started) {
      started = true;
      window.addEventListener("hashchange", render);
    }
    render();
  }
  let started = false;

  async function boot() {
    if (APP === "portal") {
      const m = location.hash.match(/^#token=([^&]+)/);
      if (m) {
        sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
        // The token leaves the address bar (and so the history, bookmarks and screen shares).
        history.replaceState(null, "", `${location.pathname}${location.search}#/endpoints`);
      }
    }
    S.token = sessionStorage.getItem(TOKEN_KEY);
    if (!S.token) {
      if (APP === "console") signIn(null);
      else {
        put(top, h("div", { class: "bar" }, h("span", { class: "brand" }, "herald")));
        setTitle("Webhooks");
        put(main, h("h1", null, "Open this page from your account"),
          h("p", null, "This page needs a portal link (it ends in #token=…). Open the webhooks page from your account's settings to get one."));
      }
      return;
    }
    try {
      const s = await api("GET", "/v1/session", undefined, S.token);
      if (APP === "portal" && s.role !== "portal") {
        put(main, h("h1", null, "Not a portal link"), h("p", null, "This token is not a portal session. Operators use ", h("a", { href: "/console" }, "the console"), "."));
        return;
      }
      if (APP === "console" && s.role !== "admin") {
        sessionStorage.removeItem(TOKEN_KEY);
        signIn("The saved token is not an admin token.");
        return;
      }
      S.session = s;
    } catch (err) {
      if (err.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        S.token = null;
        if (APP === "console") signIn("herald refused the saved admin token (401). Type it again.");
        else expired();
        return;
      }
      put(main, h("h1", null, "herald is not answering"), errorBox(err),
        button("Try again", () => boot(), { kind: "primary" }));
      return;
    }
    await start();
  }

  // ---------------------------------------------------------------------------------------
  // Charts: attempts per minute by status (stacked bars), optionally mean latency (a line).

  const CHART_STATUSES = ["delivered", "http_error", "timeout", "connection_error", "tls_error", "blocked", "other"];
  const chartKey = (s) => (CHART_STATUSES.includes(s) ? s : "other");

  function minuteChart(minutes, { latency = false, title }) {
    // Drawn at the width it is shown at (text stays readable on a phone and on a wide screen).
    const W = Math.round(Math.max(300, Math.min(1100, main.clientWidth - 64)));
    const H = W < 500 ? 180 : 220, L = 40, R = latency ? 56 : 10, T = 12, B = 24;
    const nowMin = Math.floor(Date.now() / 60000);
    const slots = Array.from({ length: 60 }, (_, i) => ({ at: (nowMin - 59 + i) * 60000, counts: {}, total: 0, mean: null, max: null }));
    const totals = {};
    for (const m of minutes || []) {
      const i = 59 - (nowMin - Math.floor(Date.parse(m.at) / 60000));
      if (i < 0 || i > 59) continue;
      const slot = slots[i];
      for (const [st, n] of Object.entries(m.attempts || {})) {
        const k = chartKey(st);
        slot.counts[k] = (slot.counts[k] || 0) + n;
        slot.total += n;
        totals[st] = (totals[st] || 0) + n;
      }
      if (m.latency_ms && slot.total > 0) { slot.mean = m.latency_ms.mean; slot.max = m.latency_ms.max; }
    }
    const maxCount = niceMax(Math.max(1, ...slots.map((s) => s.total)));
    const maxLat = niceMax(Math.max(1, ...slots.map((s) => s.mean || 0)));
    const pw = W - L - R, ph = H - T - B, bw = pw / 60;
    const mid = W < 500 ? "" : "30 min ago";
    const y = (v) => T + ph - (v / maxCount) * ph;
    const all = Object.values(totals).reduce((a, b) => a + b, 0);
    const summary = all
      ? `${title}: ${all} attempts in the last hour — ${Object.entries(totals).map(([k, v]) => `${k} ${v}`).join(", ")}`
      : `${title}: no attempts in the last hour`;
    const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": summary });
    g.append(svg("title", null, summary));
    for (const f of maxCount >= 2 ? [0, 0.5, 1] : [0, 1]) {
      const yy = y(maxCount * f);
      g.append(svg("line", { x1: L, x2: W - R, y1: yy, y2: yy, class: "grid" }),
        svg("text", { x: L - 6, y: yy + 4, class: "axis", "text-anchor": "end" }, String(Math.round(maxCount * f))));
    }
    slots.forEach((s, i) => {
      if (!s.total) return;
      let acc = 0;
      const x = L + i * bw + 0.5;
      const hhmm = new Date(s.at).toISOString().slice(11, 16);
      for (const k of CHART_STATUSES) {
        const n = s.counts[k];
        if (!n) continue;
        const y0 = y(acc), y1 = y(acc + n);
        acc += n;
        g.append(svg("rect", { x: x.toFixed(1), y: y1.toFixed(1), width: Math.max(1, bw - 1.5).toFixed(1), height: Math.max(0.5, y0 - y1).toFixed(1), class: `c-${k}` },
          svg("title", null, `${hhmm} UTC — ${k === "other" ? "not sent" : k}: ${n}${s.mean !== null && latency ? `, mean ${s.mean} ms, max ${s.max} ms` : ""}`)));
      }
    });
    if (latency) {
      const ly = (v) => T + ph - (v / maxLat) * ph;
      let d = "";
      let prev = false;
      slots.forEach((s, i) => {
        if (s.mean === null) { prev = false; return; }
        const x = L + i * bw + bw / 2;
        d += `${prev ? "L" : "M"}${x.toFixed(1)} ${ly(s.mean).toFixed(1)} `;
        prev = true;
        g.append(svg("circle", { cx: x.toFixed(1), cy: ly(s.mean).toFixed(1), r: 2.2, class: "lat-dot" }));
      });
      if (d) g.append(svg("path", { d: d.trim(), class: "lat-line" }));
      for (const f of d ? [0, 0.5, 1] : []) {
        const v = maxLat * f;
        g.append(svg("text", { x: W - R + 6, y: ly(v) + 4, class: "axis lat-axis" }, `${v < 10 && v % 1 ? v.toFixed(1) : Math.round(v)} ms`));
      }
    }
    g.append(svg("line", { x1: L, x2: W - R, y1: T + ph, y2: T + ph, class: "base" }));
    g.append(svg("text", { x: L, y: H - 6, class: "axis" }, "60 min ago"),
      svg("text", { x: L + pw / 2, y: H - 6, class: "axis", "text-anchor": "middle" }, mid),
      svg("text", { x: W - R, y: H - 6, class: "axis", "text-anchor": "end" }, "now"));
    if (!all) g.append(svg("text", { x: L + pw / 2, y: T + ph / 2, class: "axis empty", "text-anchor": "middle" }, "No attempts in the last hour"));
    const legend = h("ul", { class: "legend" },
      Object.entries(totals).sort((a, b) => b[1] - a[1]).map(([st, n]) =>
        h("li", null, h("span", { class: `swatch c-${chartKey(st)}`, "aria-hidden": "true" }), mono(st), ` ${n}`)),
      latency && all ? h("li", null, h("span", { class: "swatch line", "aria-hidden": "true" }), "mean latency (right axis)") : null);
    return h("figure", { class: "chart-box" }, g, legend);
  }

  function niceMax(v) {
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // ---------------------------------------------------------------------------------------
  // Console: overview and accounts.

  async function viewOverview(ctx) {
    viewShell("Overview", loading());
    const st = await api("GET", "/v1/status");
    if (ctx.stale()) return;
    const q = st.queue || {};
    const cards = h("div", { class: "cards" },
      card("Pending", num(q.pending), `${num(st.due)} due now`),
      card("In flight", num(st.in_flight), "attempts running"),
      card("Oldest pending", st.oldest_pending_at ? age(st.oldest_pending_at) : "—", st.oldest_pending_at ? when(st.oldest_pending_at) : "nothing waiting"),
      card("Dead letters", num(st.dead_letters), link("failed deliveries", "/deliveries", { state: "failed" })),
      card("Delivered", num(q.delivered), "deliveries kept"),
      card("Skipped", num(q.skipped), "not sent"),
      card("Storage", bytes(st.storage_bytes), "on disk"),
      card("herald", st.version || "—", `up ${duration(st.uptime_seconds)}`));
    const lastHour = (st.attempts && st.attempts.last_hour) || {};
    const lastDay = (st.attempts && st.attempts.last_day) || {};
    const statusRows = STATUSES.filter((s) => lastHour[s] || lastDay[s]).map((s) =>
      h("tr", null, h("td", null, pill(s)), h("td", { class: "num" }, num(lastHour[s] || 0)), h("td", { class: "num" }, num(lastDay[s] || 0))));
    const breakers = st.open_breakers || [];
    const eps = (st.endpoints_last_hour || []).slice().sort((a, b) => a.success_rate - b.success_rate);
    // The status names endpoints by id: look up their URLs and accounts (a few dozen at most).
    const ids = [...new Set([...breakers.map((b) => b.endpoint_id), ...eps.map((e) => e.endpoint_id)])].slice(0, 40);
    const known = new Map((await Promise.all(ids.map((id) => api("GET", `/v1/endpoints/${enc(id)}`).catch(() => null))))
      .filter(Boolean).map((e) => [e.id, e]));
    if (ctx.stale()) return;
    const epCell = (id) => {
      const e = known.get(id);
      return h("td", { class: "url-cell" }, endpointLink(id, e && e.url),
        e ? h("div", { class: "sub" }, "account ", link(e.account_id, "/endpoints", { account_id: e.account_id }, "mono")) : null);
    };
    const refresh = button("Refresh", () => render(), { kind: "small" });
    put(main, main.querySelector("h1"),
      h("div", { class: "row-end" }, h("span", { class: "muted" }, "As of ", when(new Date().toISOString())), refresh),
      h("section", { "aria-labelledby": "q-h" }, h("h2", { id: "q-h", class: "sr-only" }, "Queue"), cards),
      h("section", { class: "card", "aria-labelledby": "c-h" },
        h("h2", { id: "c-h" }, "Attempts in the last hour, per minute"),
        minuteChart(st.attempts_by_minute, { title: "Attempts per minute by status" })),
      h("div", { class: "grid2" },
        h("section", { class: "card", "aria-labelledby": "b-h" },
          h("h2", { id: "b-h" }, "Open circuit breakers"),
          breakers.length
            ? table(["Endpoint", "Breaker", "Failures in a row", "Next probe"], breakers.map((b) =>
              h("tr", null, epCell(b.endpoint_id), h("td", null, pill(b.state)),
                h("td", { class: "num" }, num(b.consecutive_failures)), h("td", null, when(b.next_probe_at)))), { caption: "Open circuit breakers" })
            : h("p", { class: "empty" }, "No open breakers — every endpoint is being attempted normally.")),
        h("section", { class: "card", "aria-labelledby": "s-h" },
          h("h2", { id: "s-h" }, "Attempts by status"),
          statusRows.length
            ? table(["Status", "Last hour", "Last day"], statusRows, { caption: "Attempts by status" })
            : h("p", { class: "empty" }, "No attempts since herald started — ingest an event, or send a test event from an endpoint."))),
      h("section", { class: "card", "aria-labelledby": "e-h" },
        h("h2", { id: "e-h" }, "Endpoints in the last hour"),
        eps.length
          ? table(["Endpoint", "Attempts", "Success rate"], eps.map((e) => h("tr", null,
            epCell(e.endpoint_id), h("td", { class: "num" }, num(e.attempts)), h("td", { class: "num" }, pct(e.success_rate)))), { caption: "Endpoints in the last hour" })
          : h("p", { class: "empty" }, "No endpoint was attempted in the last hour.")));
  }

  function card(label, value, sub) {
    return h("div", { class: "stat" }, h("div", { class: "stat-label" }, label), h("div", { class: "stat-value" }, value), h("div", { class: "stat-sub" }, sub));
  }

  function limitText(used, limit) {
    return limit === null || limit === undefined ? `${num(used)} (no limit)` : `${num(used)} of ${num(limit)}`;
  }

  async function viewAccounts(ctx) {
    viewShell("Accounts", loading());
    const data = await api("GET", "/v1/accounts");
    if (ctx.stale()) return;
    S.accounts = data.items || [];
    const out = h("div", { "aria-live": "polite" });
    const rows = S.accounts.map((a) => {
      const mint = action("Mint portal link", async () => mintDialog(a.account_id, out));
      return h("tr", null,
        h("td", null, link(a.account_id, "/endpoints", { account_id: a.account_id }, "mono")),
        h("td", null, a.plan ? a.plan : h("span", { class: "muted" }, "none")),
        h("td", null, a.limits && a.limits.webhooks === false ? pill("not entitled", "bad") : pill("allowed", "ok")),
        h("td", { class: "num" }, limitText(a.usage && a.usage.minute, a.limits && a.limits.per_minute)),
        h("td", { class: "num" }, limitText(a.usage && a.usage.day, a.limits && a.limits.per_day)),
        h("td", { class: "num" }, link(num(a.endpoints), "/endpoints", { account_id: a.account_id })),
        h("td", { class: "actions-cell" }, link("Deliveries", "/deliveries", { account_id: a.account_id }), " ", mint));
    });
    put(main, main.querySelector("h1"), takeFlash(), out,
      rows.length
        ? table(["Account", "Plan", "Webhooks", "This minute", "Today", "Endpoints", "Actions"], rows, { caption: "Accounts" })
        : h("p", { class: "empty" }, "No accounts yet — accounts appear when a plan is synced (PUT /v1/accounts/{id}) or an endpoint is created. Type an account id in the Account box above to open one."));
  }

  async function mintDialog(accountId, out) {
    const ttl = select([["1h", "1 hour"], ["8h", "8 hours"], ["24h", "24 hours"], ["7d", "7 days"]], "1h", { id: nextId("ttl") });
    const ro = h("input", { type: "checkbox", id: nextId("ro") });
    const body = h("div", null,
      h("p", null, "A link that opens the portal for account ", mono(accountId), ". Whoever has it manages this account's webhooks until it expires."),
      field("Valid for", ttl),
      h("div", { class: "check" }, ro, h("label", { for: ro.id }, "Read-only (can look, cannot change anything)")));
    if (!(await confirmDialog("Mint a portal link", body, "Mint link"))) return;
    put(out, loading("Minting…"));
    try {
      const s = await api("POST", `/v1/accounts/${enc(accountId)}/portal-sessions`, { ttl: ttl.value, read_only: ro.checked });
      put(out, h("div", { class: "secret", role: "status" },
        h("h3", null, `Portal link for ${accountId}${s.read_only ? " (read-only)" : ""}`),
        h("div", { class: "secret-row" }, h("code", { class: "mono secret-value portal-url" }, s.url), copyButton(s.url, "Copy link")),
        h("p", { class: "once" }, "Expires ", when(s.expires_at), ` (${utc(s.expires_at)}). It is shown only now; mint another when you need one. Session `, mono(s.id), ".")));
      out.querySelector("button").focus();
    } catch (err) {
      put(out, errorBox(err));
    }
  }

  // ---------------------------------------------------------------------------------------
  // Endpoints.

  function needAccount(title) {
    viewShell(title, h("p", { class: "empty" }, "Pick an account in the Account box above, or open one from ",
      link("Accounts", "/accounts"), "."),
      (S.accounts || []).length ? h("ul", { class: "plain" }, S.accounts.slice(0, 50).map((a) =>
        h("li", null, link(a.account_id, `/${section(parseRoute().parts)}`, { account_id: a.account_id }, "mono")))) : null);
  }

  async function endpointsWithHealth(acc) {
    // The list carries each endpoint's health (breaker, last hour, last success, pending).
    const list = await api("GET", `/v1/accounts/${enc(acc)}/endpoints`);
    return list.items || [];
  }

  async function viewEndpoints(ctx) {
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
      h("td", null, e.breaker ? pill(e.breaker.state) : "—"),
      h("td", { class: "num" }, num(e.pending))));
    put(main, main.querySelector("h1"), takeFlash(), head,
      table(["URL", "State", "Verified", "Event types", "Success (1 h)", "Last success", "Breaker", "Pending"], rows, { caption: "Endpoints" }));
  }

  function typesCell(types) {
    if (!types || !types.length) return h("span", { class: "muted" }, "all types");
    return h("span", { class: "chips" }, types.map((t) => h("code", { class: "chip mono" }, t)));
  }

  async function viewEndpoint(ctx, id) {
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
        ep.breaker ? h("span", { class: "pill-label" }, "breaker ", pill(ep.breaker.state)) : null));
    const facts = dl([
      ["Endpoint id", h("span", { class: "with-copy" }, mono(ep.id), copyButton(ep.id, "Copy id"))],
      ["Account", mono(ep.account_id)],
      ["Success (1 h)", ep.attempts_1h ? `${pct(ep.success_rate_1h)} of ${num(ep.attempts_1h)} attempts` : "no attempts in the last hour"],
      ["Last success", when(ep.last_success_at, "never")],
      ["Pending", num(ep.pending)],
      ["Breaker", ep.breaker ? h("span", null, pill(ep.breaker.state), ep.breaker.consecutive_failures ? ` ${ep.breaker.consecutive_failures} failures in a row` : "",
        ep.breaker.next_probe_at ? h("span", null, ", next probe ", when(ep.breaker.next_probe_at)) : "") : "—"],
      ["Event types", typesCell(ep.event_types)],
      ["Retry policy", mono(ep.retry_policy || "—")],
      ["Signature", ep.signature === "ed25519" ? "Ed25519 (v1a)" : "HMAC-SHA256 (v1)"],
      ["Created", when(ep.created_at)],
      ["Updated", when(ep.updated_at)],
      ep.client_certificate ? ["Client certificate", h("span", null, ep.client_certificate.subject, ", until ", when(ep.client_certificate.not_after))] : null,
      ep.ordering ? ["Ordering", ep.ordering.key === null ? "whole endpoint in order" : h("span", null, "by ", mono(ep.ordering.key))] : null,
      ep.rate_limit ? ["Rate limit", `${ep.rate_limit.per_second} per second`] : null,
    ]);
    const headers = Object.entries(ep.headers || {});

    put(main, h1, takeFlash(), header, actions, out,
      h("section", { class: "card", "aria-labelledby": "ep-facts" }, h("h2", { id: "ep-facts" }, "Details"), facts,
        headers.length ? h("div", null, h("h3", null, "Custom headers"),
          table(["Header", "Value"], headers.map(([k, v]) => h("tr", null, h("td", null, mono(k)), h("td", null, mono(v)))), { caption: "Custom headers" })) : null),
      h("section", { class: "card", "aria-labelledby": "ep-chart" },
        h("h2", { id: "ep-chart" }, "Last hour"),
        stats ? minuteChart(stats.minutes, { latency: true, title: "Attempts per minute by status, and mean latency" }) : h("p", { class: "muted" }, "No statistics.")),
      ro ? null : testSection(ep, cat),
      ro ? null : recoverSection(ep),
      await recentDeliveries(ep, ctx),
      snippetSection(ep));
  }

  async function verify(ep, out) {
    put(out, loading("Sending a verification challenge…"));
    try {
      const v = await api("POST", `/v1/endpoints/${enc(ep.id)}/verify`);
      const a = v.attempt || {};
      if (v.verified) {
        S.flash = { kind: "ok", kids: ["Verified: the endpoint answered the challenge correctly."] };
        render();
        return;
      }
      put(out, msg("error", h("strong", null, "Not verified. "), v.reason || "",
        h("div", { class: "kv" }, pill(a.status), a.http_status ? ` HTTP ${a.http_status}` : "", typeof a.duration_ms === "number" ? ` in ${a.duration_ms} ms` : ""),
        a.response_body ? h("pre", { class: "code small" }, a.response_body) : null));
    } catch (err) {
      put(out, errorBox(err));
    }
  }

  async function rotate(ep, out) {
    const ok = await confirmDialog("Rotate the signing secret?",
      h("p", null, "herald makes a new secret and signs with it from now on. The current one keeps signing beside it for the rotation grace period (24 h by default), so update your receiver within that time."),
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

  async function del(ep, out) {
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

  function testSection(ep, cat) {
    const types = cat.filter((t) => t.sample !== null && t.sample !== undefined);
    const opts = types.map((t) => [t.type, t.deprecated ? `${t.type} (deprecated)` : t.type]);
    opts.push(["webhook.test", "webhook.test (a generic test message)"]);
    const sel = select(opts, opts[0][0], { id: nextId("tt") });
    const sampleBox = h("div");
    const out = h("div", { "aria-live": "polite" });
    const showSample = () => {
      const t = types.find((x) => x.type === sel.value);
      const sample = t ? t.sample : { type: "webhook.test", message: "A test event from herald. If you can read this, your endpoint receives webhooks.", sent_at: new Date().toISOString() };
      put(sampleBox, 
        t && t.description ? h("p", { class: "sub" }, t.description) : null,
        h("p", { class: "hint" }, "This payload is sent, signed like every delivery:"),
        codeBlock(pretty(sample), { label: "Sample payload" }));
    };
    sel.addEventListener("change", showSample);
    showSample();
    const send = action("Send test event", async () => {
      put(out, loading("Sending…"));
      try {
        const r = await api("POST", `/v1/endpoints/${enc(ep.id)}/test`, { type: sel.value });
        const a = r.attempt;
        put(out, msg(a && a.status === "delivered" ? "ok" : a ? "error" : "info",
          a ? h("span", null, "Sent: ", pill(a.status), a.http_status ? ` HTTP ${a.http_status}` : "", ` in ${a.duration_ms} ms`, a.error ? ` — ${a.error}` : "", ". ")
            : "Queued: the attempt had not finished when herald answered. ",
          h("a", { href: `#/deliveries/${enc(r.delivery_id)}` }, "Open the delivery")));
      } catch (err) {
        put(out, errorBox(err));
      }
    }, { kind: "primary" });
    return h("section", { class: "card", "aria-labelledby": "ep-test" },
      h("h2", { id: "ep-test" }, "Send a test event"),
      field("Event type", sel), sampleBox, h("div", { class: "actions" }, send), out);
  }

  function localInput(ms) {
    const d = new Date(ms);
    const p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  }

  function recoverSection(ep) {
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

  async function recentDeliveries(ep, ctx) {
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
      items.length ? deliveriesTable(items, new Map([[ep.id, ep]]), { endpoint: false }) : h("p", { class: "empty" }, "Nothing delivered to this endpoint yet — send a test event above."),
      h("p", null, more));
  }

  function snippetSection(ep) {
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
        return 401  # not from herald: herald does not retry a 401
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
    return 401; // not from herald: herald does not retry a 401
  }
  // Answer 2xx within 5 s and queue the work; dedupe on headers["webhook-id"].
  return 200;
}
`;
    return h("section", { class: "card", "aria-labelledby": "ep-snip" },
      h("h2", { id: "ep-snip" }, "Verify the signature"),
      h("p", { class: "sub" }, ed
        ? ["herald signs each request with Ed25519 (Standard Webhooks ", mono("v1a,"), "): the signature of ", mono("{webhook-id}.{webhook-timestamp}.{raw body}"), " in ", mono("webhook-signature"), "."]
        : ["herald signs each request as Standard Webhooks does: ", mono("webhook-signature: v1,<base64 HMAC-SHA256>"), " of ", mono("{webhook-id}.{webhook-timestamp}.{raw body}"), ", keyed by the base64-decoded secret after ", mono("whsec_"), ". During a rotation there is one value per secret, space-separated."]),
      h("details", { open: true }, h("summary", null, "Python"), codeBlock(py, { label: "Python receiver" })),
      h("details", null, h("summary", null, "Node.js"), codeBlock(js, { label: "Node.js receiver" })),
      h("p", { class: "hint" }, "Verification challenge (Verify button): answer ", mono("{\"hmac\": \"<hex HMAC-SHA256(key, nonce)>\"}"),
        ed ? " keyed by the public key's 32 bytes." : " keyed by the secret's bytes."));
  }

  // ---------------------------------------------------------------------------------------
  // The endpoint form (create and edit).

  async function viewEndpointForm(ctx, id) {
    const acc = account();
    if (!id && !acc) return needAccount("Create endpoint");
    if (readOnly()) {
      viewShell(id ? "Edit endpoint" : "Create endpoint", msg("error", "This is a read-only session: it cannot change endpoints."));
      return;
    }
    viewShell(id ? "Edit endpoint" : "Create endpoint", loading());
    const [cat, ep, policies] = await Promise.all([
      catalog().catch(() => []),
      id ? api("GET", `/v1/endpoints/${enc(id)}`) : null,
      api("GET", "/v1/retry-policies").then((r) => r.items || []).catch(() => []),
    ]);
    if (ctx.stale()) return;
    if (ep && APP === "console") S.account = ep.account_id;
    const out = h("div", { "aria-live": "polite" });
    // A portal session may not add or change a header that uses an account secret, nor move an
    // endpoint that has one to another URL (the API answers 403 secret_macro): those fields are
    // the operator's, shown disabled with the reason.
    const usesSecret = (v) => /\{\{\s*secret\./.test(v);
    const operatorOwned = APP === "portal" && Boolean(ep) && Object.values(ep.headers || {}).some(usesSecret);
    const url = h("input", { type: "url", id: "f-url", name: "url", required: true, value: ep ? ep.url : "", placeholder: "https://example.com/webhooks", class: "mono", spellcheck: "false", autocomplete: "off", disabled: operatorOwned });
    const desc = h("input", { type: "text", id: "f-description", name: "description", value: ep ? ep.description : "", maxlength: "1024" });
    const chosen = new Set(ep ? ep.event_types : []);
    const known = new Set(cat.map((t) => t.type));
    const boxes = cat.map((t) => {
      const cb = h("input", { type: "checkbox", value: t.type, id: nextId("et"), checked: chosen.has(t.type) });
      return h("div", { class: "check" }, cb, h("label", { for: cb.id }, mono(t.type), t.deprecated ? h("span", { class: "pill warn" }, "deprecated") : null,
        t.description ? h("span", { class: "sub" }, ` — ${t.description}`) : null));
    });
    const other = h("input", { type: "text", id: "f-event_types", class: "mono", value: (ep ? ep.event_types : []).filter((t) => !known.has(t)).join(", "), placeholder: "order.*, invoice.paid", spellcheck: "false" });
    const headerRows = h("div", { class: "header-rows" });
    const addHeader = (k = "", v = "") => {
      const n = headerRows.children.length + 1;
      const locked = APP === "portal" && usesSecret(v);
      const name = h("input", { type: "text", class: "mono", value: k, "aria-label": `Header ${n} name`, placeholder: "x-api-key", spellcheck: "false", disabled: locked });
      const value = h("input", { type: "text", class: "mono", value: v, "aria-label": `Header ${n} value`, placeholder: APP === "portal" ? "value" : "{{ secret.API_KEY }}", spellcheck: "false", disabled: locked });
      const row = h("div", { class: "header-row" }, name, value, button("Remove", () => { row.remove(); }, { kind: "small" }));
      headerRows.append(row);
      return name;
    };
    for (const [k, v] of Object.entries(ep ? ep.headers || {} : {})) addHeader(k, v);
    const retry = h("input", { type: "text", id: "f-retry_policy", class: "mono", list: "retry-policies", value: ep ? ep.retry_policy : "", placeholder: "standard", spellcheck: "false" });
    const sig = ep ? null : select([["hmac", "HMAC-SHA256 (v1, shared secret)"], ["ed25519", "Ed25519 (v1a, public key)"]], "hmac", { id: "f-signature" });
    const ordMode = select([["", "Best effort (no order)"], ["key", "In order per payload field"], ["all", "Whole endpoint in order"]],
      ep && ep.ordering ? (ep.ordering.key === null ? "all" : "key") : "", { id: "f-ordering" });
    const ordKey = h("input", { type: "text", id: "f-ordering-key", class: "mono", value: ep && ep.ordering && ep.ordering.key ? ep.ordering.key : "", placeholder: "order_id", spellcheck: "false" });
    const rate = h("input", { type: "number", id: "f-rate_limit", min: "0", step: "any", value: ep && ep.rate_limit ? String(ep.rate_limit.per_second) : "", placeholder: "no limit" });
    const submit = button(ep ? "Save" : "Create endpoint", null, { type: "submit", kind: "primary" });
    const form = h("form", { class: "card form", novalidate: true },
      field("URL", url, operatorOwned
        ? "This endpoint sends a secret set by your platform in its headers, so only the platform's operator can change its URL."
        : "Where herald POSTs the webhooks (https)."),
      field("Description", desc),
      h("fieldset", null, h("legend", null, "Event types"),
        h("p", { class: "hint" }, "Check none to receive every type."),
        boxes.length ? boxes : h("p", { class: "muted" }, "The catalog is empty."),
        field("Other patterns", other, "Comma-separated; a trailing * matches a prefix (order.*).")),
      h("fieldset", null, h("legend", null, "Custom headers"),
        h("p", { class: "hint" }, APP === "portal"
          ? "Sent with every request. Headers that use a secret of your platform ({{ secret.NAME }}) are set by its operator and cannot be changed here."
          : "Sent with every request. A value may use {{ secret.NAME }}, an account secret set with PUT /v1/accounts/{id}/secrets/{NAME}."),
        headerRows, button("Add header", () => addHeader().focus(), { kind: "small" })),
      field("Retry policy", retry, "A policy name from herald's config; empty for the default."),
      h("datalist", { id: "retry-policies" }, (policies.length ? policies : [{ name: "none" }, { name: "short" }, { name: "standard" }])
        .map((p) => h("option", { value: p.name }, p.delays ? `${p.name}: ${p.attempts} attempts${p.delays.length ? ` (${p.delays.join(", ")})` : ""}` : p.name))),
      sig ? field("Signature", sig) : null,
      h("fieldset", null, h("legend", null, "Delivery controls"),
        field("Ordering", ordMode), field("Ordering key", ordKey, "The top-level payload field whose value orders deliveries (with “per payload field”)."),
        field("Rate limit (requests per second)", rate, "Empty for no limit; fractions allowed (0.5).")),
      h("div", { class: "actions" }, submit, h("a", { href: ep ? `#/endpoints/${enc(ep.id)}` : href("/endpoints"), class: "btn" }, "Cancel")),
      out);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      for (const x of form.querySelectorAll("[aria-invalid]")) x.removeAttribute("aria-invalid");
      const types = [...form.querySelectorAll("fieldset input[type=checkbox]:checked")].map((c) => c.value)
        .concat(other.value.split(",").map((s) => s.trim()).filter(Boolean));
      const hdrs = {};
      for (const row of headerRows.children) {
        const [n, v] = row.querySelectorAll("input");
        if (n.value.trim()) hdrs[n.value.trim()] = v.value;
      }
      const body = { url: url.value.trim(), description: desc.value, event_types: types, headers: hdrs };
      if (retry.value.trim()) body.retry_policy = retry.value.trim();
      if (sig && sig.value !== "hmac") body.signature = sig.value;
      const ordering = ordMode.value === "all" ? { key: null } : ordMode.value === "key" ? { key: ordKey.value.trim() } : null;
      const rl = rate.value.trim() ? { per_second: Number(rate.value) } : null;
      if (ep ? JSON.stringify(ordering) !== JSON.stringify(ep.ordering || null) : ordering) body.ordering = ordering;
      if (ep ? JSON.stringify(rl) !== JSON.stringify(ep.rate_limit || null) : rl) body.rate_limit = rl;
      submit.disabled = true;
      put(out, loading(ep ? "Saving…" : "Creating…"));
      try {
        if (ep) {
          await api("PATCH", `/v1/endpoints/${enc(ep.id)}`, body);
          S.flash = { kind: "ok", kids: ["Saved."] };
          location.hash = `#/endpoints/${enc(ep.id)}`;
          return;
        }
        const r = await api("POST", `/v1/accounts/${enc(acc)}/endpoints`, body);
        createdView(r);
      } catch (err) {
        put(out, errorBox(err));
        markField(form, err.field);
      } finally {
        submit.disabled = false;
      }
    });
    put(main, main.querySelector("h1"), APP === "console" ? h("p", { class: "muted" }, "Account ", mono(ep ? ep.account_id : acc)) : null, form);
  }

  function markField(form, name) {
    if (!name) return;
    const base = name.split(/[.[]/)[0];
    const el = form.querySelector(`#f-${CSS.escape(base)}`) || (base === "headers" ? form.querySelector(".header-row input") : null);
    if (el) {
      el.setAttribute("aria-invalid", "true");
      el.focus();
    }
  }

  function createdView(r) {
    const ep = r.endpoint;
    setTitle("Endpoint created");
    put(main, h("h1", { tabindex: "-1" }, "Endpoint created"),
      h("p", { class: "mono url-line" }, ep.url),
      r.public_key
        ? secretBox("Public key", r.public_key, "Verify requests with this public key (Ed25519, v1a). herald keeps the private key; the key is also shown on the endpoint's page.")
        : secretBox("Signing secret", r.secret, "This secret will not be shown again. Copy it now and give it to your receiver; if you lose it, rotate the secret."),
      h("div", { class: "actions" }, h("a", { class: "btn primary", href: `#/endpoints/${enc(ep.id)}` }, "Open endpoint"),
        link("Back to endpoints", "/endpoints", { account_id: APP === "console" ? ep.account_id : undefined }, "btn")));
    const c = main.querySelector(".secret button");
    if (c) c.focus();
  }

  // ---------------------------------------------------------------------------------------
  // The delivery log.

  function deliveriesTable(items, endpoints, { endpoint = true, accountCol = false } = {}) {
    const rows = items.map((d) => deliveryRow(d, endpoints, { endpoint, accountCol }));
    const headers = ["Created", "Delivery", "Event type", "State", "Last status", "Attempts", "Next attempt"];
    if (endpoint) headers.push("Endpoint");
    if (accountCol) headers.push("Account");
    return table(headers, rows, { caption: "Deliveries" });
  }

  function deliveryRow(d, endpoints, { endpoint = true, accountCol = false } = {}) {
    const ep = d.endpoint_id && endpoints ? endpoints.get(d.endpoint_id) : null;
    return h("tr", null,
      h("td", null, when(d.created_at)),
      h("td", null, h("a", { href: `#/deliveries/${enc(d.id)}`, class: "mono" }, d.id)),
      h("td", null, mono(d.event_type)),
      h("td", null, pill(d.state)),
      h("td", { class: "nowrap" }, pill(d.last_status), d.last_http_status ? h("span", { class: "code-num" }, ` ${d.last_http_status}`) : null),
      h("td", { class: "num" }, num(d.attempt_count)),
      h("td", null, d.state === "pending" ? when(d.next_attempt_at) : h("span", { class: "muted" }, "—")),
      endpoint ? h("td", null, endpointLink(d.endpoint_id, ep && ep.url)) : null,
      accountCol ? h("td", null, link(d.account_id, "/deliveries", { account_id: d.account_id }, "mono")) : null);
  }

  async function viewDeliveries(ctx) {
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
      endpoint_id: q.get("endpoint_id") || "",
      event_type: q.get("event_type") || "",
      state: q.get("state") || "",
      status: q.get("status") || "",
      range: q.get("range") || (q.get("since") || q.get("until") ? "custom" : ""),
      since: q.get("since") || "",
      until: q.get("until") || "",
    };
    const epCtl = acc
      ? select([["", "Any endpoint"], ...eps.map((e) => [e.id, shortUrl(e.url)]),
        ...(f.endpoint_id && !endpoints.has(f.endpoint_id) ? [[f.endpoint_id, f.endpoint_id]] : [])], f.endpoint_id, { id: "flt-endpoint" })
      : h("input", { type: "text", id: "flt-endpoint", class: "mono", value: f.endpoint_id, placeholder: "ep_…", spellcheck: "false" });
    const typeCtl = h("input", { type: "text", id: "flt-type", class: "mono", list: "flt-types", value: f.event_type, placeholder: "any", spellcheck: "false", autocomplete: "off" });
    const typeList = h("datalist", { id: "flt-types" }, cat.map((t) => h("option", { value: t.type })));
    const stateCtl = select([["", "Any state"], ...STATES.map((s) => [s, s])], f.state, { id: "flt-state" });
    const statusCtl = select([["", "Any status"], ...STATUSES.map((s) => [s, s])], f.status, { id: "flt-status" });
    const rangeCtl = select(RANGES, f.range, { id: "flt-range" });
    const toIso = (v) => { const t = new Date(v); return v && !Number.isNaN(t.getTime()) ? t.toISOString() : ""; };
    const fromCtl = h("input", { type: "datetime-local", id: "flt-from", step: "1", value: f.since ? localInput(Date.parse(f.since)) : "" });
    const toCtl = h("input", { type: "datetime-local", id: "flt-to", step: "1", value: f.until ? localInput(Date.parse(f.until)) : "" });
    const custom = h("div", { class: "custom-range", hidden: f.range !== "custom" },
      field("From", fromCtl), field("To", toCtl));
    const form = h("form", { class: "filters", role: "search", "aria-label": "Filter deliveries" },
      field("Endpoint", epCtl), field("Event type", typeCtl), typeList, field("State", stateCtl), field("Status", statusCtl),
      field("Time range", rangeCtl), custom,
      h("div", { class: "filter-actions" }, button("Apply", null, { type: "submit", kind: "small" }), button("Clear", () => {
        location.hash = href("/deliveries");
      }, { kind: "small" })));
    const results = h("div", { class: "results", "aria-live": "polite" });

    const current = () => {
      const r = rangeCtl.value;
      return {
        endpoint_id: epCtl.value.trim(), event_type: typeCtl.value.trim(), state: stateCtl.value, status: statusCtl.value, range: r,
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
    for (const el of [epCtl, stateCtl, statusCtl, rangeCtl, fromCtl, toCtl]) el.addEventListener("change", apply);
    typeCtl.addEventListener("change", apply);

    let loadGen = 0;
    async function load(c) {
      const my = ++loadGen;
      const params = new URLSearchParams();
      if (APP === "console" && acc) params.set("account_id", acc);
      for (const k of ["endpoint_id", "event_type", "state", "status"]) if (c[k]) params.set(k, c[k]);
      if (RANGE_MS[c.range]) params.set("since", new Date(Date.now() - RANGE_MS[c.range]).toISOString());
      if (c.range === "custom") {
        if (c.since) params.set("since", c.since);
        if (c.until) params.set("until", c.until);
      }
      // A page is 50 rows; ?limit= in the address asks for another size (1 to 500).
      const limit = Number(q.get("limit"));
      params.set("limit", String(Number.isInteger(limit) && limit >= 1 && limit <= 500 ? limit : 50));
      put(results, loading());
      const filtered = ["endpoint_id", "event_type", "state", "status", "range"].some((k) => c[k]);
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
        put(results, h("p", { class: "empty" }, filtered
          ? "No deliveries match these filters — widen the time range or clear a filter."
          : ["No deliveries yet — ", eps.length || !acc ? "send a test event from an endpoint's page." : readOnly() ? "no endpoint is set up." : link("Create endpoint", "/endpoints/new"), eps.length || !acc ? "" : " first, then send a test event."]));
        return;
      }
      const t = deliveriesTable(items, endpoints, { accountCol: APP === "console" && !acc });
      const tbody = t.querySelector("tbody");
      const count = h("p", { class: "muted count" });
      let shown = items.length;
      const setCount = (more) => { count.textContent = `${shown} ${shown === 1 ? "delivery" : "deliveries"} shown${more ? " — newest first; more below" : ""}`; };
      setCount(!!page.next_cursor);
      const pager = h("div", { class: "pager" });
      let cursor = page.next_cursor;
      const more = action("Load more", async () => {
        params.set("cursor", cursor);
        try {
          const next = await api("GET", `/v1/deliveries?${params}`);
          if (my !== loadGen || ctx.stale()) return;
          for (const d of next.items || []) tbody.append(deliveryRow(d, endpoints, { accountCol: APP === "console" && !acc }));
          shown += (next.items || []).length;
          cursor = next.next_cursor;
          setCount(!!cursor);
          if (!cursor) put(pager, h("p", { class: "muted" }, "That is all."));
        } catch (err) {
          put(pager, errorBox(err), more);
        }
      });
      if (cursor) pager.append(more);
      put(results, count, t, pager);
    }

    put(main, main.querySelector("h1"), takeFlash(),
      APP === "console" ? h("p", { class: "muted" }, acc ? ["Account ", mono(acc)] : "All accounts — pick one in the Account box to filter by endpoint.") : null,
      form, results);
    await load(f);
  }

  // ---------------------------------------------------------------------------------------
  // One delivery, top to bottom; one event.

  async function viewDelivery(ctx, id) {
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
        await api("POST", `/v1/deliveries/${enc(d.id)}/retry`);
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
        ["Endpoint", d.endpoint_id ? h("span", null, endpointLink(d.endpoint_id, ep && ep.url), ep ? null : h("span", { class: "muted" }, " (deleted)")) : h("span", { class: "muted" }, "none (no endpoint subscribed)")],
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

  function attemptsTable(list, opened) {
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

  function attemptDetail(a) {
    const hdrs = Object.entries(a.request_headers || {});
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
      h("h3", null, "Response excerpt"),
      a.response_body ? codeBlock(a.response_body, { label: "Response body excerpt" }) : h("p", { class: "muted" }, "(empty)"));
  }

  async function replayDialog(ev, endpointId, out) {
    const to = select([...(endpointId ? [["one", "Only this delivery's endpoint"]] : []), ["all", "Every endpoint subscribed to this type"]], endpointId ? "one" : "all", { id: nextId("to") });
    const ok = await confirmDialog("Replay this event as a new event?",
      h("div", null, h("p", null, "herald ingests the same payload again with a new event id (and a new webhook-id), and delivers it now. Receivers that dedupe on webhook-id process it again."),
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

  async function viewEvent(ctx, id) {
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
        (ev.deliveries || []).length ? deliveriesTable(ev.deliveries, null) : h("p", { class: "empty" }, "No deliveries.")),
      h("section", { class: "card" }, h("h2", null, "Payload"), codeBlock(pretty(ev.payload), { label: "Event payload" })));
  }

  // ---------------------------------------------------------------------------------------
  // Incidents and the catalog.

  async function viewIncidents(ctx) {
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
    const sel = select([["1h", "Last hour"], ["24h", "Last 24 hours"], ["7d", "Last 7 days"]], since, { id: "inc-since" });
    sel.addEventListener("change", () => { location.hash = href("/incidents", { since: sel.value }); });
    const items = data.items || [];
    const rows = items.map((i) => {
      const ep = i.endpoint_id ? endpoints.get(i.endpoint_id) : null;
      return h("tr", null,
        h("td", null, endpointLink(i.endpoint_id, ep && ep.url)),
        h("td", null, pill(i.status)),
        h("td", { class: "num" }, i.http_status ? String(i.http_status) : "—"),
        h("td", { class: "num" }, num(i.deliveries)),
        h("td", { class: "num" }, num(i.pending)),
        h("td", null, when(i.first_at)),
        h("td", null, when(i.last_at)),
        h("td", null, h("span", { class: "examples" }, (i.examples || []).map((x) => h("a", { href: `#/deliveries/${enc(x)}`, class: "mono" }, x)))),
        h("td", null, link("Show in log", "/deliveries", { endpoint_id: i.endpoint_id, status: i.status, range: since === "1h" ? "1h" : since === "7d" ? "7d" : "24h" })));
    });
    put(main, main.querySelector("h1"),
      h("p", { class: "sub" }, "Failed deliveries grouped by endpoint and by status and HTTP code, largest first. Pending ones are still being retried."),
      APP === "console" ? h("p", { class: "muted" }, acc ? ["Account ", mono(acc)] : "All accounts") : null,
      h("div", { class: "filters narrow" }, field("Period", sel)),
      items.length
        ? table(["Endpoint", "Status", "HTTP", "Deliveries", "Pending", "First", "Last", "Examples", ""], rows, { caption: "Incidents" })
        : h("p", { class: "empty" }, "No failures in this period — nothing to do."),
      data.complete === false ? h("p", { class: "hint" }, "Only the newest 5,000 deliveries were looked at.") : null);
  }

  async function viewEventTypes(ctx) {
    viewShell("Event types", loading());
    const items = (await api("GET", "/v1/event-types")).items || [];
    S.catalog = items;
    if (ctx.stale()) return;
    if (!items.length) {
      put(main, main.querySelector("h1"),
        h("p", { class: "empty" }, "No event types in the catalog yet — the operator declares them under [catalog.events] in herald's config."));
      return;
    }
    const toc = h("nav", { class: "toc", "aria-label": "Event types" }, h("ul", { class: "chips" }, items.map((t) =>
      h("li", null, h("a", { href: "#/event-types", class: "chip mono", "data-target": `et-${t.type}` }, t.type)))));
    toc.addEventListener("click", (e) => {
      const a = e.target.closest("a[data-target]");
      if (!a) return;
      e.preventDefault();
      const el = document.getElementById(a.dataset.target);
      if (el) { el.scrollIntoView(); el.focus({ preventScroll: true }); }
    });
    put(main, main.querySelector("h1"),
      h("p", { class: "sub" }, "Every type herald may send, with its payload schema and a sample."), toc,
      items.map((t) => h("section", { class: "card", id: `et-${t.type}`, tabindex: "-1", "aria-labelledby": `eth-${t.type}` },
        h("h2", { id: `eth-${t.type}`, class: "mono" }, t.type, t.deprecated ? h("span", { class: "pill warn" }, "deprecated") : null),
        h("p", null, t.description || h("span", { class: "muted" }, "No description.")),
        t.debounce ? h("p", { class: "hint" }, `Debounced: one event per ${t.debounce.window} per `, mono(t.debounce.key || "key"), ` (${t.debounce.mode}).`) : null,
        h("h3", null, "Sample"),
        t.sample !== null && t.sample !== undefined ? codeBlock(pretty(t.sample), { label: `${t.type} sample` }) : h("p", { class: "muted" }, "No sample."),
        t.schema ? h("details", null, h("summary", null, "Schema (JSON Schema)"), codeBlock(pretty(t.schema), { label: `${t.type} schema` })) : h("p", { class: "muted" }, "No schema."))));
  }

  boot();
})();
