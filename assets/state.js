// herald pages: what every part of the pages shares: which page this is, its elements, the lists of
// states and statuses, and the page state `S`.

export const APP = document.body.dataset.app === "console" ? "console" : "portal";
export const TOKEN_KEY = `herald.${APP}.token`;
export const top = document.getElementById("top");
// Inside another site's page (an embedded portal): that page has its own header.
export const FRAMED = window.top !== window.self;
// The portal's brand as last read from /v1/session, for the pages shown without a session.
export const BRAND_KEY = "herald.portal.brand";
export const main = document.getElementById("app");

export const STATES = ["pending", "delivered", "failed", "skipped"];
export const STATUSES = [
  "delivered", "http_error", "timeout", "connection_error", "tls_error", "blocked",
  "rate_limited", "debounced", "paused", "disabled", "unverified", "not_entitled", "no_endpoint",
];
export const SENT_FAILURES = ["http_error", "timeout", "connection_error", "tls_error", "blocked"];
export const RANGES = [
  ["", "Any time"], ["15m", "Last 15 minutes"], ["1h", "Last hour"],
  ["24h", "Last 24 hours"], ["7d", "Last 7 days"], ["custom", "Custom…"],
];
export const RANGE_MS = { "15m": 15 * 60e3, "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3 };

export const S = {
  token: null,
  session: null,
  gen: 0, // bumped on every render: late answers of an old view are dropped
  account: null, // the account the console is looking at (the portal's is its session's)
  catalog: null,
  flash: null, // a message for the next render (after an action that navigates)
  shown: null, // the message the current render shows
  refocus: null, // the label of the action under way, whose render gives focus back to it
  accounts: null,
};

// sessionStorage, or this page's memory where the browser denies it (a frame on another site
// with third-party storage blocked): the portal still works, only a reload needs the link again.
const memory = new Map();
export const kept = {
  get(k) { try { return sessionStorage.getItem(k); } catch (_) { return memory.has(k) ? memory.get(k) : null; } },
  set(k, v) { try { sessionStorage.setItem(k, v); } catch (_) { memory.set(k, v); } },
  remove(k) { try { sessionStorage.removeItem(k); } catch (_) { memory.delete(k); } },
};
