// herald pages: charts: attempts per minute (or per bucket of minutes) by status (stacked
// bars), optionally the p50 and p95 latency of the requests sent (two lines).

import { h, svg } from "./dom.js";
import { mono, plural } from "./format.js";
import { main } from "./state.js";


export const CHART_STATUSES = ["delivered", "http_error", "timeout", "connection_error", "tls_error", "blocked", "other"];
export const chartKey = (s) => (CHART_STATUSES.includes(s) ? s : "other");

const compact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });

// The windows a chart shows, by minutes per entry: how many entries, what they span, and the
// axis' labels (start, middle).
const WINDOWS = {
  1: { slots: 60, span: "the last hour", start: "60 min ago", mid: "30 min ago" },
  15: { slots: 96, span: "the last 24 hours", start: "24 h ago", mid: "12 h ago" },
  120: { slots: 84, span: "the last 7 days", start: "7 days ago", mid: "3½ days ago" },
};
// The latency lines: the 50th and 95th percentile of the requests sent.
const LAT_SERIES = [["p50", "lat-line"], ["p95", "lat-line p95"]];

// `bucket`: minutes per entry (1: the last hour by minute; 15: the last day by quarter hour;
// 120: the last week by two hours).
export function minuteChart(minutes, { latency = false, title, bucket = 1 }) {
  const win = WINDOWS[bucket] || WINDOWS[1];
  const nSlots = win.slots;
  const span = win.span;
  // Drawn at the width it is shown at (text stays readable on a phone and on a wide screen).
  const W = Math.round(Math.max(300, Math.min(1100, main.clientWidth - 64)));
  const H = W < 500 ? 180 : 220, R = latency ? 56 : 10, T = 12, B = 24;
  const ms = bucket * 60000;
  const nowSlot = Math.floor(Date.now() / ms);
  const slots = Array.from({ length: nSlots }, (_, i) => ({ at: (nowSlot - (nSlots - 1) + i) * ms, counts: {}, total: 0, mean: null, max: null, p50: null, p95: null }));
  const totals = {};
  for (const m of minutes || []) {
    const i = (nSlots - 1) - (nowSlot - Math.floor(Date.parse(m.at) / ms));
    if (i < 0 || i > nSlots - 1) continue;
    const slot = slots[i];
    for (const [st, n] of Object.entries(m.attempts || {})) {
      const k = chartKey(st);
      slot.counts[k] = (slot.counts[k] || 0) + n;
      slot.total += n;
      totals[st] = (totals[st] || 0) + n;
    }
    if (m.latency_ms && slot.total > 0) {
      slot.mean = m.latency_ms.mean; slot.max = m.latency_ms.max;
      slot.p50 = m.latency_ms.p50 ?? null; slot.p95 = m.latency_ms.p95 ?? null;
    }
  }
  const maxCount = niceMax(Math.max(1, ...slots.map((s) => s.total)));
  const maxLat = niceMax(Math.max(1, ...slots.map((s) => s.p95 || 0)));
  // The left axis is as wide as its longest label (7 px a character at the axis' font size).
  const L = Math.max(40, 12 + 7 * compact.format(maxCount).length);
  const pw = W - L - R, ph = H - T - B, bw = pw / nSlots;
  const mid = W < 500 ? "" : win.mid;
  const y = (v) => T + ph - (v / maxCount) * ph;
  const all = Object.values(totals).reduce((a, b) => a + b, 0);
  const summary = all
    ? `${title}: ${all} ${plural(all, "attempt")} in ${span} — ${Object.entries(totals).map(([k, v]) => `${k} ${v}`).join(", ")}`
    : `${title}: no attempts in ${span}`;
  const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": summary });
  g.append(svg("title", null, summary));
  for (const f of maxCount >= 2 ? [0, 0.5, 1] : [0, 1]) {
    const yy = y(maxCount * f);
    g.append(svg("line", { x1: L, x2: W - R, y1: yy, y2: yy, class: "grid" }),
      svg("text", { x: L - 6, y: yy + 4, class: "axis", "text-anchor": "end" }, compact.format(Math.round(maxCount * f))));
  }
  slots.forEach((s, i) => {
    if (!s.total) return;
    let acc = 0;
    const x = L + i * bw + 0.5;
    const iso = new Date(s.at).toISOString();
    const hhmm = bucket >= 60 ? `${iso.slice(5, 10)} ${iso.slice(11, 16)}` : iso.slice(11, 16);
    const lat = s.p50 !== null && latency ? `, p50 ${s.p50} ms, p95 ${s.p95} ms, max ${s.max} ms` : "";
    for (const k of CHART_STATUSES) {
      const n = s.counts[k];
      if (!n) continue;
      const y0 = y(acc), y1 = y(acc + n);
      acc += n;
      g.append(svg("rect", { x: x.toFixed(1), y: y1.toFixed(1), width: Math.max(1, bw - 1.5).toFixed(1), height: Math.max(0.5, y0 - y1).toFixed(1), class: `c-${k}` },
        svg("title", null, `${hhmm} UTC${bucket > 1 ? ` (${bucket >= 60 ? `${bucket / 60} h` : `${bucket} min`})` : ""} — ${k === "other" ? "not sent" : k}: ${n}${lat}`)));
    }
  });
  let drawn = false;
  if (latency) {
    const ly = (v) => T + ph - (v / maxLat) * ph;
    for (const [key, cls] of LAT_SERIES) {
      let d = "";
      let prev = false;
      slots.forEach((s, i) => {
        if (s[key] === null) { prev = false; return; }
        const x = L + i * bw + bw / 2;
        d += `${prev ? "L" : "M"}${x.toFixed(1)} ${ly(s[key]).toFixed(1)} `;
        prev = true;
        if (key === "p50") g.append(svg("circle", { cx: x.toFixed(1), cy: ly(s[key]).toFixed(1), r: 2.2, class: "lat-dot" }));
      });
      if (d) { g.append(svg("path", { d: d.trim(), class: cls })); drawn = true; }
    }
    for (const f of drawn ? [0, 0.5, 1] : []) {
      const v = maxLat * f;
      g.append(svg("text", { x: W - R + 6, y: ly(v) + 4, class: "axis lat-axis" }, `${v < 10 && v % 1 ? v.toFixed(1) : Math.round(v)} ms`));
    }
  }
  g.append(svg("line", { x1: L, x2: W - R, y1: T + ph, y2: T + ph, class: "base" }));
  g.append(svg("text", { x: L, y: H - 6, class: "axis" }, win.start),
    svg("text", { x: L + pw / 2, y: H - 6, class: "axis", "text-anchor": "middle" }, mid),
    svg("text", { x: W - R, y: H - 6, class: "axis", "text-anchor": "end" }, "now"));
  if (!all) g.append(svg("text", { x: L + pw / 2, y: T + ph / 2, class: "axis empty", "text-anchor": "middle" }, `No attempts in ${span}`));
  const legend = h("ul", { class: "legend" },
    Object.entries(totals).sort((a, b) => b[1] - a[1]).map(([st, n]) =>
      h("li", null, h("span", { class: `swatch c-${chartKey(st)}`, "aria-hidden": "true" }), mono(st), ` ${n}`)),
    drawn ? h("li", null, h("span", { class: "swatch line", "aria-hidden": "true" }), "p50 latency") : null,
    drawn ? h("li", null, h("span", { class: "swatch line p95", "aria-hidden": "true" }), "p95 latency (right axis)") : null);
  return h("figure", { class: "chart-box" }, g, legend);
}

export function niceMax(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
