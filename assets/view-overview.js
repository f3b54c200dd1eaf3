// herald pages: console: overview and accounts.

import { api, enc, endpointsById } from "./api.js";
import { minuteChart } from "./chart.js";
import { h, nextId, put } from "./dom.js";
import { age, breakerPill, bytes, count, duration, mono, num, pct, pill, utc, when } from "./format.js";
import { action, button, confirmDialog, copyButton, endpointLink, errorBox, field, link, loading, select, table } from "./pieces.js";
import { render, takeFlash, viewShell } from "./shell.js";
import { S, STATUSES, main } from "./state.js";


// What the pending deliveries wait for: due now and free to go, then what holds the others.
function pendingNote(st) {
  const held = st.held || {};
  const parts = [`${num(st.due_now ?? st.due)} due now`];
  const by = [["breaker", "held by breakers"], ["paused", "paused"], ["rate_limit", "rate-limited"], ["ordering", "behind an earlier one of their key"]];
  for (const [k, text] of by) if (held[k]) parts.push(`${num(held[k])} ${text}`);
  return parts.join(" · ");
}

export async function viewOverview(ctx) {
  viewShell("Overview", loading());
  const st = await api("GET", "/v1/status");
  if (ctx.stale()) return;
  const q = st.queue || {};
  const cards = h("div", { class: "cards" },
    card("Pending", num(q.pending), pendingNote(st)),
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
  const known = await endpointsById([...breakers.map((b) => b.endpoint_id), ...eps.map((e) => e.endpoint_id)], 40);
  if (ctx.stale()) return;
  const epCell = (id) => {
    const e = known.get(id);
    return h("td", { class: "url-cell" }, endpointLink(id, e),
      e ? h("div", { class: "sub" }, "account ", link(e.account_id, "/endpoints", { account_id: e.account_id }, "mono")) : null);
  };
  const refresh = button("Refresh", () => render(), { kind: "small" });
  // A card holding one table is not a landmark of its own: its table's region (named by its
  // caption, the card's heading) is, and two landmarks may not share a name.
  put(main, main.querySelector("h1"),
    h("div", { class: "row-end" }, h("span", { class: "muted" }, "As of ", when(new Date().toISOString())), refresh),
    h("section", { "aria-labelledby": "q-h" }, h("h2", { id: "q-h", class: "sr-only" }, "Queue"), cards),
    h("section", { class: "card", "aria-labelledby": "c-h" },
      h("h2", { id: "c-h" }, "Attempts in the last hour, per minute"),
      minuteChart(st.attempts_by_minute, { title: "Attempts per minute by status" })),
    h("div", { class: "grid2" },
      h("section", { class: "card" },
        h("h2", { id: "b-h" }, "Open circuit breakers"),
        breakers.length
          ? table(["Endpoint", "Breaker", "Failures in a row", "Next probe"], breakers.map((b) =>
            h("tr", null, epCell(b.endpoint_id), h("td", null, breakerPill(b.state)),
              h("td", { class: "num" }, num(b.consecutive_failures)), h("td", null, when(b.next_probe_at)))), { caption: "Open circuit breakers" })
          : h("p", { class: "empty" }, "No open breakers — every endpoint is being attempted normally.")),
      h("section", { class: "card" },
        h("h2", { id: "s-h" }, "Attempts by status"),
        statusRows.length
          ? table(["Status", "Last hour", "Last day"], statusRows, { caption: "Attempts by status" })
          : h("p", { class: "empty" }, "No attempts since herald started — ingest an event, or send a test event from an endpoint."))),
    h("section", { class: "card" },
      h("h2", { id: "e-h" }, "Endpoints in the last hour"),
      eps.length
        ? table(["Endpoint", "Attempts", "Success rate"], eps.map((e) => h("tr", null,
          epCell(e.endpoint_id), h("td", { class: "num" }, num(e.attempts)), h("td", { class: "num" }, pct(e.success_rate)))), { caption: "Endpoints in the last hour" })
        : h("p", { class: "empty" }, "No endpoint was attempted in the last hour.")));
}

export function card(label, value, sub) {
  return h("div", { class: "stat" }, h("div", { class: "stat-label" }, label), h("div", { class: "stat-value" }, value), h("div", { class: "stat-sub" }, sub));
}

export function limitText(used, limit) {
  return limit === null || limit === undefined ? `${num(used)} (no limit)` : `${num(used)} of ${num(limit)}`;
}

export async function viewAccounts(ctx) {
  viewShell("Accounts", loading());
  const data = await api("GET", "/v1/accounts");
  if (ctx.stale()) return;
  S.accounts = data.items || [];
  const out = h("div", { "aria-live": "polite" });
  const rows = S.accounts.map((a) => {
    const mint = action("Mint portal link", async () => mintDialog(a.account_id, out));
    const purge = action("Purge", async () => purgeDialog(a.account_id, out), { kind: "danger" });
    return h("tr", null,
      h("td", null, link(a.account_id, "/endpoints", { account_id: a.account_id }, "mono")),
      h("td", null, a.plan ? a.plan : h("span", { class: "muted" }, "none")),
      h("td", null, a.limits && a.limits.webhooks === false ? pill("not entitled", "bad") : pill("allowed", "ok")),
      h("td", { class: "num" }, limitText(a.usage && a.usage.minute, a.limits && a.limits.per_minute)),
      h("td", { class: "num" }, limitText(a.usage && a.usage.day, a.limits && a.limits.per_day)),
      h("td", { class: "num" }, link(num(a.endpoints), "/endpoints", { account_id: a.account_id })),
      h("td", { class: "actions-cell" }, link("Deliveries", "/deliveries", { account_id: a.account_id }), " ", mint, " ", purge));
  });
  put(main, main.querySelector("h1"), takeFlash(), out,
    rows.length
      ? table(["Account", "Plan", "Webhooks", "This minute", "Today", "Endpoints", "Actions"], rows, { caption: "Accounts" })
      : h("p", { class: "empty" }, "No accounts yet — accounts appear when a plan is synced (PUT /v1/accounts/{id}) or an endpoint is created. Type an account id in the Account box above to open one."));
}

// Purging cannot be undone: the operator types the account id before the button works.
export async function purgeDialog(accountId, out) {
  const input = h("input", { type: "text", autocomplete: "off", spellcheck: "false", class: "mono" });
  const body = h("div", null,
    h("p", null, "Deletes everything of account ", mono(accountId), ": its events and payloads, deliveries and attempts, endpoints and their secrets, account secrets, portal sessions, plan and usage. None of its deliveries is sent after this. It cannot be undone."),
    field("Type the account id to confirm", input));
  if (!(await confirmDialog(`Purge account ${accountId}`, body, "Purge account", { danger: true, typed: { input, text: accountId } }))) return;
  put(out, loading("Purging…"));
  try {
    const r = await api("DELETE", `/v1/accounts/${enc(accountId)}`);
    if (S.account === accountId) S.account = null;
    const p = r.purged;
    S.flash = { kind: "ok", kids: [`Account ${accountId} purged: ${count(p.events, "event")}, ${count(p.deliveries, "delivery", "deliveries")} and ${count(p.endpoints, "endpoint")} deleted.`] };
    await render();
  } catch (err) {
    put(out, errorBox(err));
  }
}

export async function mintDialog(accountId, out) {
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
