// herald pages: the API client: herald's JSON API with the page's token.

import { parseJSON } from "./format.js";
import { field } from "./pieces.js";
import { S } from "./state.js";


// What the page does when herald refuses its current token: the shell sets it at boot (sign
// in again, or "link expired"), so this client imports nothing above it.
let unauthorized = () => {};
export function onUnauthorized(fn) {
  unauthorized = fn;
}

// An API error: its status, `code`, sentence, the `field` it is about and the `reason` (the
// rule that field broke, docs/api.md "Errors"), which the pages' words are chosen by.
export class ApiError extends Error {
  constructor(status, code, message, field, reason) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
    this.reason = reason || null;
  }
}

export async function api(method, path, body, token) {
  const used = token || S.token;
  const headers = { Authorization: `Bearer ${used}`, Accept: "application/json" };
  const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (_) {
    throw new ApiError(0, "network", "The server did not answer. Check the connection and try again.");
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = parseJSON(text); } catch (_) { data = null; }
  }
  if (!resp.ok) {
    const e = (data && data.error) || {};
    const err = new ApiError(resp.status, e.code || `http_${resp.status}`,
      e.message || `The server answered ${resp.status}`, e.field, e.reason);
    // Only the page's current token: an old link's late 401 must not end a newer link's session.
    if (resp.status === 401 && !token && used === S.token) unauthorized();
    throw err;
  }
  return data;
}

export const enc = encodeURIComponent;

// The endpoints of these ids (each read once, the first `max` of them), by id; one that cannot
// be read (deleted, another account's) is left out.
export async function endpointsById(ids, max = 50) {
  const unique = [...new Set(ids.filter(Boolean))].slice(0, max);
  const found = await Promise.all(unique.map((id) => api("GET", `/v1/endpoints/${enc(id)}`).catch(() => null)));
  return new Map(found.filter(Boolean).map((e) => [e.id, e]));
}

// Whether an endpoint's event-type patterns take type `t`, as delivery decides: an exact type,
// a `prefix.*` pattern or `*`; no patterns take every type.
export const takesType = (patterns, t) =>
  !patterns.length || patterns.some((p) => (p.endsWith("*") ? t.startsWith(p.slice(0, -1)) : p === t));

export async function catalog() {
  if (!S.catalog) S.catalog = (await api("GET", "/v1/event-types")).items || [];
  return S.catalog;
}
