// herald pages: pieces of the pages: messages, tables, buttons, dialogs, fields, links.

import { ApiError, enc } from "./api.js";
import { append, h, nextId } from "./dom.js";
import { endpointName, mono, tick } from "./format.js";
import { APP, S } from "./state.js";


export function loading(text = "Loading…") {
  return h("p", { class: "loading", role: "status" }, h("span", { class: "spinner", "aria-hidden": "true" }), text);
}

export function errorBox(err, what) {
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

// The technical line behind an error in a customer's words, one click away.
export function details(text) {
  return h("details", { class: "tech" }, h("summary", null, "Details"), h("p", { class: "mono small" }, text));
}

// What the rule an API error names (`reason`, docs/api.md "Errors") means, in a customer's
// words; null for a reason without words here (the API's sentence is shown then).
const REASON_WORDS = {
  invalid_url: "Enter the full address of your receiver, starting with https:// (for example https://example.com/webhooks).",
  not_https: "The address must start with https:// — webhooks are only sent over encrypted connections.",
  user_info: "Leave the user name and password out of the address; send credentials in a custom header instead.",
  no_host: "Enter the full address of your receiver, starting with https:// (for example https://example.com/webhooks).",
  private_address: "This address points to a private or internal network, which webhooks are never sent to. Use your receiver's public address.",
  too_long: "This is too long.",
  not_ascii: "Use an address in plain letters: an international domain in its xn-- form.",
  no_at: "An address needs an @, as in ops@example.com.",
  several_at: "An address has one @, as in ops@example.com.",
  local_part: "The part before the @ may hold letters, digits and . _ - + (no dot at its start or end).",
  quoted_local_part: "Quoted addresses are not accepted: write it without quotes.",
  routing: "The part before the @ may not hold % or !.",
  ip_literal: "Use a domain name after the @, not an IP address.",
  domain: "The part after the @ must be a domain name such as example.com.",
  not_an_address: "This is not a mail address such as ops@example.com.",
  repeated: "This address is in the list already.",
};
export const reasonWords = (err) => (err && err.reason && REASON_WORDS[err.reason]) || null;

// Marks `el` as the field an error is about: the words beside it (inside its field), the
// technical line behind a toggle, and focus on it; editing it takes the error away.
export function fieldError(el, words, technical) {
  const box = el.closest(".field") || el.parentElement;
  for (const x of box.querySelectorAll(".field-error")) x.remove();
  const errId = `${el.id}-error`;
  box.append(h("div", { class: "field-error", id: errId }, words, technical && technical !== words ? details(technical) : null));
  el.setAttribute("aria-invalid", "true");
  el.setAttribute("aria-describedby", errId);
  el.addEventListener("input", () => {
    const e = document.getElementById(errId);
    if (e) e.remove();
    el.removeAttribute("aria-invalid");
    el.removeAttribute("aria-describedby");
  }, { once: true });
  el.focus();
}

export function msg(kind, ...kids) {
  return h("div", { class: `msg ${kind}`, role: kind === "error" ? "alert" : "status" }, ...kids);
}

export function copyButton(getText, label = "Copy") {
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

export function codeBlock(text, { copy = true, label } = {}) {
  const pre = h("pre", { class: "code", tabindex: "0", "aria-label": label }, text);
  return h("div", { class: "codebox" }, copy ? h("div", { class: "codebar" }, copyButton(() => text, "Copy")) : null, pre);
}

export function secretBox(title, value, note) {
  return h("div", { class: "secret", role: "status" },
    h("h3", null, title),
    h("div", { class: "secret-row" }, h("code", { class: "mono secret-value" }, value), copyButton(value, "Copy")),
    h("p", { class: "once" }, note));
}

export function table(headers, rows, { caption, cls = "" } = {}) {
  // A column of numbers is right-aligned, its header too.
  const first = rows.find((r) => r && r.tagName === "TR");
  const numeric = (i) => first && first.cells[i] && first.cells[i].classList.contains("num");
  // Each cell names its column: on a small screen a row is a card of labelled lines.
  for (const r of rows) {
    if (!r || r.tagName !== "TR") continue;
    [...r.cells].forEach((td, i) => { if (headers[i] && td.colSpan === 1) td.dataset.label = headers[i]; });
  }
  return h("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption || "table" },
    h("table", { class: cls },
      caption ? h("caption", { class: "sr-only" }, caption) : null,
      // A column of buttons or links has no visible header; screen readers still get one.
      h("thead", null, h("tr", null, headers.map((c, i) => h("th", { scope: "col", class: numeric(i) ? "num" : null },
        c === "" ? h("span", { class: "sr-only" }, "Actions") : c)))),
      h("tbody", null, rows)));
}

export function dl(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => h("div", null, h("dt", null, k), h("dd", null, v))));
}

export function button(text, onclick, { kind = "", disabled = false, type = "button" } = {}) {
  return h("button", { type, class: `btn ${kind}`.trim(), onclick, disabled }, text);
}

// A button that runs an async action once at a time, showing it is busy. A message an earlier
// action left at the top goes when this one starts (a message answers the action that made it);
// relative times move when it ends; and focus stays with the action: on the button, or, when
// the action drew the page again, on the message that answers it or the button of the same name
// (see `render`).
export function action(text, fn, opts = {}) {
  const b = button(text, null, opts);
  b.addEventListener("click", async () => {
    if (b.getAttribute("aria-busy") === "true") return;
    b.setAttribute("aria-busy", "true");
    b.classList.add("busy");
    for (const f of document.querySelectorAll("main [data-flash]")) f.remove();
    S.refocus = text;
    try { await fn(b); } finally {
      S.refocus = null;
      b.removeAttribute("aria-busy");
      b.classList.remove("busy");
      tick();
      if (b.isConnected && (document.activeElement === document.body || !document.activeElement)) b.focus();
    }
  });
  return b;
}

// A modal confirmation (a <dialog>, not window.confirm): resolves true when confirmed.
// `typed`: an input and the exact text it must hold before the confirm button works (for
// what cannot be undone).
export function confirmDialog(title, body, confirmText, { danger = false, typed = null } = {}) {
  return new Promise((resolve) => {
    const hid = nextId("dlg");
    const ok = button(confirmText, () => d.close("ok"), { kind: danger ? "danger" : "primary" });
    if (typed) {
      const sync = () => { ok.disabled = typed.input.value !== typed.text; };
      typed.input.addEventListener("input", sync);
      sync();
    }
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
    (typed ? typed.input : danger ? cancel : ok).focus();
  });
}

export function field(labelText, control, hint) {
  const id = control.id || nextId("f");
  control.id = id;
  const hintEl = hint ? h("p", { class: "hint", id: `${id}-hint` }, hint) : null;
  if (hintEl) control.setAttribute("aria-describedby", hintEl.id);
  return h("div", { class: "field" }, h("label", { for: id }, labelText), control, hintEl);
}

export function select(options, value, props = {}) {
  return h("select", props, options.map(([v, t]) => h("option", { value: v, selected: v === (value || "") }, t)));
}

export const readOnly = () => APP === "portal" && S.session && S.session.read_only;
export const account = () => (APP === "portal" ? S.session && S.session.account_id : S.account);

// A hash link; in the console the lists carry the account they show.
export function href(path, params = {}) {
  const q = new URLSearchParams();
  if (APP === "console" && S.account && params.account_id === undefined &&
    /^\/(endpoints|deliveries|incidents|alerts)(\/new)?$/.test(path)) q.set("account_id", S.account);
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const qs = q.toString();
  return `#${path}${qs ? `?${qs}` : ""}`;
}

export const link = (text, path, params, cls) => h("a", { href: href(path, params), class: cls }, text);

// A link to an endpoint, named as pages name it (`endpointName`: `ep` is the endpoint, or
// anything with its `url` and `description`); its URL and id on hover.
export function endpointLink(id, ep) {
  if (!id) return h("span", { class: "muted" }, "none");
  const name = endpointName(ep);
  const described = Boolean(ep && (ep.description || "").trim());
  return h("a", { href: `#/endpoints/${enc(id)}`, class: described ? "ep-name" : "mono ep-name", title: ep && ep.url ? `${ep.url}\n${id}` : id }, name || id);
}

// Tabs (the ARIA tabs pattern): `items` are [key, title, panel]; the one shown is `selected`,
// kept in the address (?tab=) so a reload or a shared link opens it. Arrow keys, Home and End
// move between tabs.
export function tabs(label, items, selected) {
  const list = h("div", { class: "tabs", role: "tablist", "aria-label": label });
  const panels = [];
  const buttons = items.map(([key, title, panel], i) => {
    const tabId = nextId("tab");
    const panelId = nextId("panel");
    const b = h("button", { type: "button", role: "tab", id: tabId, class: "tab", "aria-controls": panelId, "data-key": key }, title);
    panels.push(h("div", { role: "tabpanel", id: panelId, "aria-labelledby": tabId, class: "tab-panel", tabindex: "0" }, panel));
    b.addEventListener("click", () => show(i, true));
    b.addEventListener("keydown", (e) => {
      const n = items.length;
      const to = { ArrowRight: (i + 1) % n, ArrowLeft: (i - 1 + n) % n, Home: 0, End: n - 1 }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      show(to, true);
      buttons[to].focus();
    });
    return b;
  });
  function show(i, remember) {
    buttons.forEach((b, j) => {
      b.setAttribute("aria-selected", String(i === j));
      b.tabIndex = i === j ? 0 : -1;
      panels[j].hidden = i !== j;
    });
    if (remember) {
      const [path, query = ""] = location.hash.split("?");
      const q = new URLSearchParams(query);
      if (i === 0) q.delete("tab"); else q.set("tab", items[i][0]);
      const qs = q.toString();
      history.replaceState(null, "", `${location.pathname}${location.search}${path}${qs ? `?${qs}` : ""}`);
    }
  }
  append(list, buttons);
  show(Math.max(0, items.findIndex(([key]) => key === selected)), false);
  return h("div", { class: "tabbed" }, list, panels);
}
