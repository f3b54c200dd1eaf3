// herald pages: what every part of the pages shares: which page this is, its elements, the lists of
// states and statuses, and the page state `S`.

export const APP = document.body.dataset.app === "console" ? "console" : "portal";
export const TOKEN_KEY = `herald.${APP}.token`;
export const top = document.getElementById("top");
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
  accounts: null,
};
