// herald pages: the payload filter editor of the endpoint form, with "test against a recent
// event" (POST /v1/accounts/{id}/filter-test; the grammar is in docs/api.md, "Payload filters").

import { ApiError, api, enc } from "./api.js";
import { h, nextId, put } from "./dom.js";
import { mono, parseJSON, pretty, relText } from "./format.js";
import { button, field, msg } from "./pieces.js";

const EXAMPLE = '{"payload": {"amount": {"$gte": 100}}}';

// The editor for `ep` (null when creating) of account `acc`. `value()` is the filter to send
// (null for none) or throws an ApiError naming the field `filter`.
export function filterEditor(ep, acc) {
  const text = h("textarea", {
    id: "f-filter", class: "mono", rows: "5", spellcheck: "false", placeholder: EXAMPLE,
  });
  text.value = ep && ep.filter ? pretty(ep.filter) : "";
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
  const test = button("Test", async () => {
    let filter;
    try { filter = value(); } catch (e) { put(result, msg("error", e.message)); return; }
    if (!pick.value) { put(result, msg("error", "Choose an event to test against.")); return; }
    put(result);
    try {
      const r = await api("POST", `/v1/accounts/${enc(acc)}/filter-test`, { filter, event_id: pick.value });
      put(result, r.matches
        ? msg("ok", h("strong", null, "Matches: "), "this endpoint would get the event.")
        : msg("info", h("strong", null, "Does not match: "), mono(r.reason || "")));
    } catch (e) {
      put(result, msg("error", e.field ? `${e.field}: ${e.message}` : e.message));
    }
  }, { kind: "small" });
  recentEvents(acc).then((events) => {
    put(pick, events.length
      ? events.map((e) => h("option", { value: e.id, title: e.id }, `${e.type} — ${relText(e.at)}`))
      : h("option", { value: "" }, "No events yet"));
  }, () => put(pick, h("option", { value: "" }, "Recent events could not be loaded")));

  const node = h("fieldset", { class: "filter-editor" }, h("legend", null, "Payload filter"),
    h("p", { class: "hint" }, "Only events that match get to this endpoint, after the event types. Empty: every event of the chosen types. ",
      "JSON matched against {\"type\", \"payload\"}, for example ", mono(EXAMPLE), "; operators: $eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exists, $startsWith, $endsWith, $and, $or, $not."),
    field("Filter (JSON)", text),
    h("div", { class: "filter-test" }, field("Test against a recent event", pick), test),
    result);
  return { node, value };
}

// The account's 20 most recent events (newest first), from its delivery log.
async function recentEvents(acc) {
  const r = await api("GET", `/v1/deliveries?account_id=${enc(acc)}&limit=100`);
  const seen = new Map();
  for (const d of r.items || []) {
    if (!seen.has(d.event_id)) seen.set(d.event_id, { id: d.event_id, type: d.event_type, at: d.created_at });
    if (seen.size >= 20) break;
  }
  return [...seen.values()];
}
