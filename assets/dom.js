// herald pages: dOM helpers: text is always text.


export function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  setProps(el, props);
  append(el, kids);
  return el;
}

export const SVG_NS = "http://www.w3.org/2000/svg";
export function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  append(el, kids);
  return el;
}

export function setProps(el, props) {
  if (!props) return;
  for (const [k, v] of Object.entries(props)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v);
    } else if (k === "value" || k === "checked" || k === "selected" || k === "disabled") {
      el[k] = v;
    } else if (v === true) {
      el.setAttribute(k, "");
    } else if (k === "title" || k === "aria-label" || k === "alt") {
      el.setAttribute(k, visible(v));
    } else {
      el.setAttribute(k, String(v));
    }
  }
}

export function append(el, kids) {
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : textOf(String(kid), el.namespaceURI === SVG_NS));
  }
}

// Invisible and direction-changing characters: the C0 and C1 controls but tab, newline and CR,
// bidirectional marks, embeddings, overrides and isolates, zero-width characters and the byte
// order mark. Text from outside (payloads, responses, descriptions, URLs) shows them as visible
// escapes and never applies them: a right-to-left override makes "evil\u{202E}txt.exe" read
// "evilexe.txt".
const HIDDEN = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F\u061C\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u2069\uFEFF]/u;
const HIDDEN_ALL = new RegExp(HIDDEN.source, "gu");
const escOf = (c) => `\\u{${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}}`;

// `s` as text: a text node, or with hidden characters, text and marked escapes.
function textOf(s, plain) {
  if (!HIDDEN.test(s)) return document.createTextNode(s);
  if (plain) return document.createTextNode(s.replace(HIDDEN_ALL, escOf));
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const m of s.matchAll(HIDDEN_ALL)) {
    if (m.index > last) frag.append(s.slice(last, m.index));
    const esc = escOf(m[0]);
    const span = document.createElement("span");
    span.className = "esc";
    span.title = `invisible character ${esc.slice(2)}`;
    span.textContent = esc;
    frag.append(span);
    last = m.index + m[0].length;
  }
  if (last < s.length) frag.append(s.slice(last));
  return frag;
}

// The same for text that goes into an attribute (a tooltip, an accessible name).
export const visible = (s) => String(s).replace(HIDDEN_ALL, escOf);

// Replaces an element's children (nulls and false skipped, arrays flattened).
export function put(el, ...kids) {
  el.replaceChildren();
  append(el, kids);
  return el;
}

export let uid = 0;
export const nextId = (p) => `${p}-${++uid}`;
