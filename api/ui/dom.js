// DOM helpers. Every piece of text goes in as a text node: memory content is untrusted data
// and is never parsed as HTML. Links may only point inside the inspector (`#/...`).

const PROPS = new Set(["value", "checked", "disabled", "hidden", "open", "selected"]);

/** `h("p", {class: "x", onclick: f}, "text", child)`: an element with attributes and children. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v);
    } else if (k === "class") {
      el.className = v;
    } else if (PROPS.has(k)) {
      el[k] = v;
    } else if (k === "href") {
      el.setAttribute("href", safeHref(v));
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  return add(el, children);
}

// Bidirectional embeddings, overrides and isolates (which reorder what follows: a source
// `inv\u202Etxt.exe` would display as another file name), zero-width and invisible
// characters, line/paragraph separators and Unicode tags (invisible text). Shown as U+FFFD,
// one for one, as the MemoryPack's Markdown does (`cairn_models::text`).
const HIDDEN = /[\u202A-\u202E\u2066-\u2069\u200B\u2028\u2029\u2060-\u2064\u180E\uFEFF\u{E0000}-\u{E007F}]/gu;

/** Text as shown: hidden and reordering characters made visible. */
export function visible(s) {
  return String(s).replace(HIDDEN, "\uFFFD");
}

/** Appends children (nodes, strings, numbers, nested arrays; null and false are skipped). */
export function add(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(visible(c)));
  }
  return el;
}

/** Replaces an element's children (null and false are skipped, unlike `replaceChildren`). */
export function put(el, ...children) {
  el.replaceChildren();
  return add(el, children);
}

/** Only in-app hash links: anything else (a `javascript:` URL, another site) is refused. */
export function safeHref(v) {
  const s = String(v);
  if (!s.startsWith("#/")) throw new Error("refusing link " + JSON.stringify(s.slice(0, 40)));
  return s;
}

/** A labelled form control: `<label>Text <input ...></label>`. */
export function field(label, control, hint) {
  return h("label", { class: "field" }, h("span", { class: "label" }, label), control,
    hint ? h("small", { class: "hint" }, hint) : null);
}

export function date(ms) {
  if (ms == null) return "—";
  const d = new Date(Number(ms));
  return Number.isNaN(d.getTime()) ? String(ms) : d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

/** A definition list from `[term, value]` pairs (pairs with a null value are skipped). */
export function dl(pairs, cls) {
  const list = h("dl", { class: cls || "facts" });
  for (const [k, v] of pairs) {
    if (v == null || v === "") continue;
    list.append(h("dt", {}, k), h("dd", {}, v));
  }
  return list;
}

export function chip(text, cls) {
  return h("span", { class: "chip " + (cls || "") }, text);
}
