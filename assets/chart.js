// herald pages: charts: attempts per minute (or per bucket of minutes) by status (stacked
// bars), optionally mean latency (a line).

import { h, svg } from "./dom.js";
import { mono, plural } from "./format.js";
import { main } from "./state.js";


export const CHART_STATUSES = ["delivered", "http_error", "timeout", "connection_error", "tls_error", "blocked", "other"];
export const chartKey = (s) => (CHART_STATUSES.includes(s) ? s : "other");

const compact = new Intl.NumberFormat("en", { notation: "compact", maximumFractionDigits: 1 });

// `bucket`: minutes per entry (1: the last hour by minute; 15: the last day by quarter hour).
export function minuteChart(minutes, { latency = false, title, bucket = 1 }) {
  const nSlots = bucket === 1 ? 60 : Math.round(24 * 60 / bucket);
  const span = bucket === 1 ? "the last hour" : "the last 24 hours";
  // Drawn at the width it is shown at (text stays readable on a phone and on a wide screen).
  const W = Math.round(Math.max(300, Math.min(1100, main.clientWidth - 64)));
  const H = W < 500 ? 180 : 220, R = latency ? 56 : 10, T = 12, B = 24;
  const ms = bucket * 60000;
  const nowSlot = Math.floor(Date.now() / ms);
  const slots = Array.from({ length: nSlots }, (_, i) => ({ at: (nowSlot - (nSlots - 1) + i) * ms, counts: {}, total: 0, mean: null, max: null }));
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
    if (m.latency_ms && slot.total > 0) { slot.mean = m.latency_ms.mean; slot.max = m.latency_ms.max; }
  }
  const maxCount = niceMax(Math.max(1, ...slots.map((s) => s.total)));
  const maxLat = niceMax(Math.max(1, ...slots.map((s) => s.mean || 0)));
  // The left axis is as wide as its longest label (7 px a character at the axis' font size).
  const L = Math.max(40, 12 + 7 * compact.format(maxCount).length);
  const pw = W - L - R, ph = H - T - B, bw = pw / nSlots;
  const mid = W < 500 ? "" : bucket === 1 ? "30 min ago" : "12 h ago";
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
    const hhmm = new Date(s.at).toISOString().slice(11, 16);
    for (const k of CHART_STATUSES) {
      const n = s.counts[k];
      if (!n) continue;
      const y0 = y(acc), y1 = y(acc + n);
      acc += n;
      g.append(svg("rect", { x: x.toFixed(1), y: y1.toFixed(1), width: Math.max(1, bw - 1.5).toFixed(1), height: Math.max(0.5, y0 - y1).toFixed(1), class: `c-${k}` },
        svg("title", null, `${hhmm} UTC${bucket > 1 ? ` (${bucket} min)` : ""} — ${k === "other" ? "not sent" : k}: ${n}${s.mean !== null && latency ? `, mean ${s.mean} ms, max ${s.max} ms` : ""}`)));
    }
  });
  if (latency) {
    const ly = (v) => T + ph - (v / maxLat) * ph;
    let d = "";
    let prev = false;
    slots.forEach((s, i) => {
      if (s.mean === null) { prev = false; return; }
      const x = L + i * bw + bw / 2;
      d += `${prev ? "L" : "M"}${x.toFixed(1)} ${ly(s.mean).toFixed(1)} `;
      prev = true;
      g.append(svg("circle", { cx: x.toFixed(1), cy: ly(s.mean).toFixed(1), r: 2.2, class: "lat-dot" }));
    });
    if (d) g.append(svg("path", { d: d.trim(), class: "lat-line" }));
    for (const f of d ? [0, 0.5, 1] : []) {
      const v = maxLat * f;
      g.append(svg("text", { x: W - R + 6, y: ly(v) + 4, class: "axis lat-axis" }, `${v < 10 && v % 1 ? v.toFixed(1) : Math.round(v)} ms`));
    }
  }
  g.append(svg("line", { x1: L, x2: W - R, y1: T + ph, y2: T + ph, class: "base" }));
  g.append(svg("text", { x: L, y: H - 6, class: "axis" }, bucket === 1 ? "60 min ago" : "24 h ago"),
    svg("text", { x: L + pw / 2, y: H - 6, class: "axis", "text-anchor": "middle" }, mid),
    svg("text", { x: W - R, y: H - 6, class: "axis", "text-anchor": "end" }, "now"));
  if (!all) g.append(svg("text", { x: L + pw / 2, y: T + ph / 2, class: "axis empty", "text-anchor": "middle" }, `No attempts in ${span}`));
  const legend = h("ul", { class: "legend" },
    Object.entries(totals).sort((a, b) => b[1] - a[1]).map(([st, n]) =>
      h("li", null, h("span", { class: `swatch c-${chartKey(st)}`, "aria-hidden": "true" }), mono(st), ` ${n}`)),
    latency && all ? h("li", null, h("span", { class: "swatch line", "aria-hidden": "true" }), "mean latency (right axis)") : null);
  return h("figure", { class: "chart-box" }, g, legend);
}

export function niceMax(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
