// herald pages: formatting: times, sizes, durations, statuses.

import { h } from "./dom.js";


export function utc(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toISOString().replace("T", " ").replace(".000Z", "Z").replace("Z", " UTC");
}

export function relText(iso) {
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

export function when(iso, empty = "—") {
  if (!iso) return h("span", { class: "muted" }, empty);
  return h("time", { datetime: iso, title: utc(iso), "data-rel": "" }, relText(iso));
}

// Relative times ("52 s ago") move on their own, and at once after an action ([`tick`]).
export function tick() {
  for (const t of document.querySelectorAll("time[data-rel]")) t.textContent = relText(t.dateTime);
}
setInterval(tick, 20000);

export function bytes(n) {
  if (typeof n !== "number") return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v >= 10 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}

export function duration(sec) {
  if (typeof sec !== "number") return "—";
  const d = Math.floor(sec / 86400), hh = Math.floor((sec % 86400) / 3600), m = Math.floor((sec % 3600) / 60);
  if (d) return `${d} d ${hh} h`;
  if (hh) return `${hh} h ${m} min`;
  if (m) return `${m} min ${sec % 60} s`;
  return `${sec} s`;
}

export function age(iso) {
  if (!iso) return "—";
  return duration(Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000)));
}

export const pct = (x) => (typeof x === "number" ? `${Math.round(x * 1000) / 10}%` : "—");
export const num = (n) => (typeof n === "number" ? n.toLocaleString("en") : "—");

// `n` things, in the plural English takes for that number: count(1, "attempt") is
// "1 attempt", count(2, "delivery", "deliveries") "2 deliveries".
const PLURAL = new Intl.PluralRules("en");
export const plural = (n, one, many = `${one}s`) => (PLURAL.select(n) === "one" ? one : many);
export const count = (n, one, many) => `${num(n)} ${plural(n, one, many)}`;

// A sentence that starts with a lower-case word (an API's reason) made to start a sentence.
export const sentence = (s) => (s ? s[0].toUpperCase() + s.slice(1) : s);

export function kindOf(s) {
  switch (s) {
    case "delivered": case "active": case "closed": return "ok";
    case "failed": case "http_error": case "timeout": case "connection_error": case "tls_error":
    case "blocked": case "disabled": case "open": return "bad";
    case "paused": case "rate_limited": case "half_open": case "unverified": return "warn";
    case "pending": return "info";
    default: return "muted";
  }
}

export const pill = (s, kind) => (s ? h("span", { class: `pill ${kind || kindOf(s)}` }, s) : h("span", { class: "muted" }, "—"));
// A breaker's state as a pill, in words (half_open reads "probing").
export const breakerPill = (s) => (s ? h("span", { class: `pill ${kindOf(s)}` }, breakerWord(s)) : pill(s));
export const mono = (t, cls = "") => h("code", { class: `mono ${cls}`.trim() }, t);

// `s` cut in the middle to at most `n` characters: both ends stay (a URL's host and its query).
export function middle(s, n = 60) {
  const t = String(s);
  if (t.length <= n) return t;
  const head = Math.ceil((n - 1) * 0.6);
  return `${t.slice(0, head)}…${t.slice(t.length - (n - 1 - head))}`;
}

// How pages name an endpoint: its description, else its URL with its query (cut in the
// middle, never at the end, so endpoints that differ only there read differently).
export function endpointName(ep) {
  if (!ep) return "";
  const d = (ep.description || "").trim();
  return d || middle((ep.url || "").replace(/^https:\/\//, ""));
}

// A breaker's state in words.
export function breakerWord(state) {
  return { closed: "closed", open: "open", half_open: "probing" }[state] || state;
}

// JSON with numbers kept as written (big integers, 1.50) where the browser can: the payload
// shown is the payload herald stored.
export function parseJSON(text) {
  if (typeof JSON.rawJSON === "function") {
    // Only integers past 2^53 are kept as written (herald's own numbers never are).
    return JSON.parse(text, (k, v, ctx) =>
      typeof v === "number" && !Number.isSafeInteger(v) && ctx && typeof ctx.source === "string" && /^-?\d+$/.test(ctx.source)
        ? JSON.rawJSON(ctx.source)
        : v);
  }
  return JSON.parse(text);
}
export const pretty = (v) => JSON.stringify(v, null, 2);

// Why a pending delivery waits (the delivery's `waiting`), in the customer's words.
export function waitingText(w) {
  if (!w) return h("span", { class: "muted" }, "—");
  const at = w.until ? when(w.until) : null;
  switch (w.reason) {
    case "in_flight": return h("span", null, "being attempted now");
    case "breaker": return h("span", { class: "waiting breaker" }, "endpoint failing: held until its next probe ", at);
    case "paused": return h("span", { class: "waiting" }, "endpoint paused: it will be skipped ", at, " unless resumed");
    case "disabled": return h("span", { class: "waiting" }, "endpoint disabled: it will be skipped ", at, " unless resumed");
    case "rate_limit": return h("span", { class: "waiting" }, `rate limit${w.per_second ? ` ${w.per_second}/s` : ""}: next `, at);
    case "retry": return h("span", null, "retry ", at);
    case "scheduled": return h("span", null, "first attempt ", at);
    default: return h("span", null, "due now: goes when the endpoint has room");
  }
}
