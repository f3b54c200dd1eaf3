// herald pages: the payload filter editor of the endpoint form, with "test against a recent
// event" (POST /v1/accounts/{id}/filter-test; the grammar is in docs/api.md, "Payload filters").
// The test sends the form's event types and the endpoint's channels, so it decides as delivery
// does: types, then channels, then the filter.

import { ApiError, api, enc, takesType } from "./api.js";
import { h, nextId, put } from "./dom.js";
import { mono, parseJSON, pretty, relText, utc } from "./format.js";
import { button, codeBlock, field, msg } from "./pieces.js";

const EXAMPLE = '{"payload": {"amount": {"$gte": 100}}}';

// The editor for `ep` (null when creating) of account `acc`. `types()` is the form's event types
// as they stand (an empty list takes every type). `value()` is the filter to send (null for
// none) or throws an ApiError naming the field `filter`.
export function filterEditor(ep, acc, types) {
  const text = h("textarea", {
    id: "f-filter", class: "mono", spellcheck: "false", placeholder: EXAMPLE,
  });
  text.value = ep && ep.filter ? pretty(ep.filter) : "";
  // Tall enough for the whole pretty-printed filter (up to 20 lines; it scrolls past that).
  text.rows = Math.min(20, Math.max(5, text.value.split("\n").length + 1));
  const value = () => {
    const t = text.value.trim();
    if (!t) return null;
    try {
      return parseJSON(t);
    } catch (e) {
      throw new ApiError(422, "invalid_field", `The filter is not valid JSON: ${e.message}`, "filter");
    }
  };

  const pickId = nextId("ft");
  const pick = h("select", { id: pickId }, h("option", { value: "" }, "Loading recent events…"));
  const result = h("div", { "aria-live": "polite", class: "filter-result" });
  const shown = h("div", { class: "filter-event" });
  let events = new Map();
  const showEvent = () => {
    const e = events.get(pick.value);
    put(shown, e && e.payload !== undefined
      ? [h("p", { class: "hint" }, `Payload of ${e.id} (${e.type}, ${utc(e.at)}):`), codeBlock(pretty(e.payload), { copy: false, label: "Payload of the chosen event" })]
      : null);
  };
  pick.addEventListener("change", () => { put(result); showEvent(); });
  const test = button("Test", async () => {
    let filter;
    try { filter = value(); } catch (e) { put(result, msg("error", e.message)); return; }
    if (!pick.value) { put(result, msg("error", "Choose an event to test against.")); return; }
    put(result);
    try {
      const body = { filter, event_id: pick.value, event_types: types(), channels: ep && ep.channels ? ep.channels : [] };
      const r = await api("POST", `/v1/accounts/${enc(acc)}/filter-test`, body);
      put(result, r.matches
        ? msg("ok", h("strong", null, "Matches: "), "this endpoint would get the event.")
        : msg("info", h("strong", null, "Does not match: "), r.reason || ""));
    } catch (e) {
      put(result, msg("error", e.field ? `${e.field}: ${e.message}` : e.message));
    }
  }, { kind: "small" });
  recentEvents(acc).then((list) => {
    events = new Map(list.map((e) => [e.id, e]));
    const wanted = types();
    const takes = (t) => takesType(wanted, t);
    const option = (e) => h("option", { value: e.id, title: e.id }, label(e));
    const mine = list.filter((e) => takes(e.type));
    const others = list.filter((e) => !takes(e.type));
    put(pick, !list.length
      ? h("option", { value: "" }, "No events yet")
      : others.length && mine.length
        ? [h("optgroup", { label: "Types this endpoint takes" }, mine.map(option)), h("optgroup", { label: "Other types" }, others.map(option))]
        : list.map(option));
    showEvent();
  }, () => put(pick, h("option", { value: "" }, "Recent events could not be loaded")));

  const node = h("fieldset", { class: "filter-editor" }, h("legend", null, "Payload filter"),
    h("p", { class: "hint" }, "Only events that match get to this endpoint, after the event types. Empty: every event of the chosen types. ",
      "JSON matched against {\"type\", \"payload\"}, for example ", mono(EXAMPLE), "; operators: $eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exists, $startsWith, $endsWith, $and, $or, $not."),
    field("Filter (JSON)", text),
    h("div", { class: "filter-test" }, field("Test against a recent event", pick), test),
    result, shown);
  return { node, value };
}

// An event as the picker lists it: its type, when, the end of its id, and a preview of its
// payload (events of one type are told apart by the last two).
function label(e) {
  const p = preview(e.payload);
  return `${e.type} · ${relText(e.at)} · …${e.id.slice(-6)}${p ? ` · ${p}` : ""}`;
}

// What tells payloads apart at a glance: up to three of its top-level numbers and short strings,
// ids, amounts and names first (`order_id=ord_1 total=4201`); else the start of its JSON.
const TELLING = /(^|_)id$|amount|total|name|status|email|number/i;
function preview(payload) {
  if (payload === undefined) return "";
  const short = (t, n) => (t.length > n ? `${t.slice(0, n - 1)}…` : t);
  if (payload && typeof payload === "object" && !Array.isArray(payload)) {
    const fields = Object.entries(payload)
      .filter(([, v]) => typeof v === "number" || (typeof v === "string" && v.length <= 40))
      .sort(([a], [b]) => Number(TELLING.test(b)) - Number(TELLING.test(a)))
      .slice(0, 3);
    if (fields.length) return fields.map(([k, v]) => `${short(k, 20)}=${short(String(v), 24)}`).join(" ");
  }
  return short(JSON.stringify(payload), 48);
}

// The account's 20 most recent events (newest first), from its delivery log, with their
// payloads (an event that cannot be read is listed without one).
async function recentEvents(acc) {
  const r = await api("GET", `/v1/deliveries?account_id=${enc(acc)}&limit=100`);
  const seen = new Map();
  for (const d of r.items || []) {
    if (!seen.has(d.event_id)) seen.set(d.event_id, { id: d.event_id, type: d.event_type, at: d.created_at });
    if (seen.size >= 20) break;
  }
  const list = [...seen.values()];
  await Promise.all(list.map((e) => api("GET", `/v1/events/${enc(e.id)}`).then((v) => { e.payload = v.payload; }, () => {})));
  return list;
}
