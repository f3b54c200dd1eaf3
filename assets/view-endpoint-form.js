// herald pages: the endpoint form (create and edit).

import { api, catalog, enc } from "./api.js";
import { h, nextId, put } from "./dom.js";
import { count, mono } from "./format.js";
import { account, button, details, errorBox, field, href, link, loading, msg, readOnly, reasonWords, secretBox, select } from "./pieces.js";
import { setTitle, viewShell } from "./shell.js";
import { APP, S, main } from "./state.js";
import { filterEditor } from "./filter-editor.js";
import { needAccount } from "./view-endpoints.js";


export async function viewEndpointForm(ctx, id) {
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
      t.description ? h("span", { class: "sub" }, ` — ${t.description}`) : null,
      t.deprecated && t.replaced_by ? h("span", { class: "sub" }, ` Use ${t.replaced_by} instead.`) : null));
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
  // The config's retry policies, each with its schedule; the endpoint's own stays listed.
  const known_ = policies.map((p) => p.name);
  const current = ep ? ep.retry_policy : "";
  const policyText = (p) => (p.delays ? `${p.name}: ${count(p.attempts, "attempt")}${p.delays.length ? ` (${p.delays.join(", ")})` : ""}` : p.name);
  const dflt = policies.find((p) => p.default);
  const retry = select([["", dflt ? `The default policy (${policyText(dflt)})` : "The default policy"], ...policies.map((p) => [p.name, policyText(p)]),
    ...(current && !known_.includes(current) ? [[current, current]] : [])], current, { id: "f-retry_policy" });
  const sig = ep ? null : select([["hmac", "HMAC-SHA256 (v1, shared secret)"], ["ed25519", "Ed25519 (v1a, public key)"]], "hmac", { id: "f-signature" });
  const ordMode = select([["", "Best effort (no order)"], ["key", "In order per payload field"], ["all", "Whole endpoint in order"]],
    ep && ep.ordering ? (ep.ordering.key === null ? "all" : "key") : "", { id: "f-ordering" });
  const ordKey = h("input", { type: "text", id: "f-ordering-key", class: "mono", value: ep && ep.ordering && ep.ordering.key ? ep.ordering.key : "", placeholder: "order_id", spellcheck: "false" });
  const rate = h("input", { type: "number", id: "f-rate_limit", min: "0", step: "any", value: ep && ep.rate_limit ? String(ep.rate_limit.per_second) : "", placeholder: "no limit" });
  const trace = h("input", { type: "checkbox", id: "f-propagate_trace", checked: !!(ep && ep.propagate_trace), "aria-describedby": "f-propagate_trace-hint" });
  // The event types as the form has them now (the filter test decides with them).
  const chosenTypes = () => boxes.map((b) => b.querySelector("input")).filter((c) => c.checked).map((c) => c.value)
    .concat(other.value.split(",").map((s) => s.trim()).filter(Boolean));
  const flt = filterEditor(ep, ep ? ep.account_id : acc, chosenTypes);
  const submit = button(ep ? "Save" : "Create endpoint", null, { type: "submit", kind: "primary" });
  const form = h("form", { class: "card form", novalidate: true },
    field("URL", url, operatorOwned
      ? "This endpoint sends a secret set by your platform in its headers, so only the platform's operator can change its URL."
      : "Where we POST the webhooks (https)."),
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
    field("Retry policy", retry, "How often, and for how long, a failed delivery is tried again."),
    sig ? field("Signature", sig) : null,
    h("fieldset", null, h("legend", null, "Delivery controls"),
      field("Ordering", ordMode), field("Ordering key", ordKey, "The top-level payload field whose value orders deliveries (with “per payload field”)."),
      field("Rate limit (requests per second)", rate, "Empty for no limit; fractions allowed (0.5)."),
      h("div", { class: "check" }, trace, h("label", { for: trace.id }, "Pass the trace on (traceparent)")),
      h("p", { class: "hint", id: "f-propagate_trace-hint" },
        "Each request carries the W3C trace context of its attempt, so the receiver's tracing joins the sender's trace. It shows the sender's trace ids to the receiver.")),
    flt.node,
    h("div", { class: "actions" }, submit, h("a", { href: ep ? `#/endpoints/${enc(ep.id)}` : href("/endpoints"), class: "btn" }, "Cancel")),
    out);
  // A message answers the Save that made it: editing the field it points at takes it away
  // (seen on the way down, before the field's own listener unmarks it).
  form.addEventListener("input", (e) => {
    if (e.target.getAttribute && e.target.getAttribute("aria-invalid") === "true") { markField(form, null); put(out); }
  }, true);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    markField(form, null);
    const types = chosenTypes();
    const hdrs = {};
    for (const row of headerRows.children) {
      const [n, v] = row.querySelectorAll("input");
      if (n.value.trim()) hdrs[n.value.trim()] = v.value;
    }
    const body = { url: url.value.trim(), description: desc.value, event_types: types, headers: hdrs };
    if (retry.value) body.retry_policy = retry.value;
    if (sig && sig.value !== "hmac") body.signature = sig.value;
    const ordering = ordMode.value === "all" ? { key: null } : ordMode.value === "key" ? { key: ordKey.value.trim() } : null;
    const rl = rate.value.trim() ? { per_second: Number(rate.value) } : null;
    if (ep ? JSON.stringify(ordering) !== JSON.stringify(ep.ordering || null) : ordering) body.ordering = ordering;
    if (ep ? JSON.stringify(rl) !== JSON.stringify(ep.rate_limit || null) : rl) body.rate_limit = rl;
    if (ep ? trace.checked !== !!ep.propagate_trace : trace.checked) body.propagate_trace = trace.checked;
    let filter;
    try {
      filter = flt.value();
    } catch (err) {
      put(out, markField(form, err) ? msg("error", "Check the highlighted field.") : errorBox(err));
      return;
    }
    if (ep ? JSON.stringify(filter) !== JSON.stringify(ep.filter || null) : filter) body.filter = filter;
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
      put(out, markField(form, err) ? msg("error", "Check the highlighted field.") : errorBox(err));
    } finally {
      submit.disabled = false;
    }
  });
  put(main, main.querySelector("h1"), APP === "console" ? h("p", { class: "muted" }, "Account ", mono(ep ? ep.account_id : acc)) : null, form);
}

// Shows an error at the field it names (the control marked invalid, the sentence tied to it
// with aria-describedby, focus moved there), in the words of whoever reads the page; answers
// whether a field took it.
export function markField(form, err) {
  for (const x of form.querySelectorAll(".field-error")) x.remove();
  for (const x of form.querySelectorAll("[aria-invalid]")) {
    x.removeAttribute("aria-invalid");
    x.setAttribute("aria-describedby", (x.getAttribute("aria-describedby") || "").split(" ").filter((i) => !i.endsWith("-error")).join(" "));
  }
  const name = err && err.field;
  if (!name) return false;
  const base = name.split(/[.[]/)[0];
  const el = form.querySelector(`#f-${CSS.escape(base)}`) || (base === "headers" ? form.querySelector(".header-row input") : null);
  if (!el) return false;
  const errId = `${el.id}-error`;
  const words = fieldMessage(err);
  const text = h("div", { class: "field-error", id: errId }, words,
    APP === "portal" && err.message && err.message !== words ? details(err.message) : null);
  // After the control (and its hint), inside its field.
  const box = el.closest(".field") || el.parentElement;
  box.append(text);
  const before = el.getAttribute("aria-describedby");
  el.setAttribute("aria-invalid", "true");
  el.setAttribute("aria-describedby", [errId, before].filter(Boolean).join(" "));
  // Once the field is changed, its error goes.
  el.addEventListener("input", () => {
    text.remove();
    el.removeAttribute("aria-invalid");
    if (before) el.setAttribute("aria-describedby", before); else el.removeAttribute("aria-describedby");
  }, { once: true });
  el.focus();
  return true;
}

// The API's sentence for a field, for the page's reader: the portal's customers get plain
// words (no status codes, parser wording or operator config keys); the console's operator
// gets herald's own sentence.
export function fieldMessage(err) {
  const m = String(err.message || "");
  if (APP !== "portal") return m;
  // The rule the API names (docs/api.md, "Errors"), never its sentence, decides the words.
  if (err.field === "url" && err.reason === "too_long") return "The address is too long: at most 2,048 characters.";
  const words = reasonWords(err);
  if (words) return words;
  if (err.field === "retry_policy") return "Pick one of the retry policies listed.";
  if (/^rate_limit/.test(err.field || "")) return "The rate limit is a number of requests per second above 0 (fractions allowed), or empty for none.";
  // Otherwise herald's sentence, without an operator's config key in parentheses.
  return m.replace(/\s*\([^()]*\b[a-z_]+\.[a-z_]+ = [^()]*\)|\s*\((?:[^()]*\s)?[a-z_]+\.[a-z_]+\)/g, "");
}

export function createdView(r) {
  const ep = r.endpoint;
  setTitle("Endpoint created");
  put(main, h("h1", { tabindex: "-1" }, "Endpoint created"),
    h("p", { class: "mono url-line" }, ep.url),
    r.public_key
      ? secretBox("Public key", r.public_key, "Verify requests with this public key (Ed25519, v1a). We keep the private key; the key is also shown on the endpoint's page.")
      : secretBox("Signing secret", r.secret, "This secret will not be shown again. Copy it now and give it to your receiver; if you lose it, rotate the secret."),
    h("div", { class: "actions" }, h("a", { class: "btn primary", href: `#/endpoints/${enc(ep.id)}` }, "Open endpoint"),
      link("Back to endpoints", "/endpoints", { account_id: APP === "console" ? ep.account_id : undefined }, "btn")));
  const c = main.querySelector(".secret button");
  if (c) c.focus();
}
