// A small Markdown renderer for MemoryPacks: headings, paragraphs (one line per line),
// lists, block quotes, fenced code, `code`, **bold** and [n] citation marks. It builds DOM
// nodes and sets text only (nothing is parsed as HTML): memory content is untrusted data. Block
// quotes hold the memories themselves and are shown verbatim, without inline markup.

import { h } from "./dom.js";

const INLINE = /`([^`\n]+)`|\*\*([^*\n]+)\*\*|\[(\d{1,4})\]/g;

/**
 * Renders `md` into a DocumentFragment.
 * opts.refHref(text): an in-app link for inline code that is a ref, or null.
 * opts.onCite(n): called when the [n] mark is activated (absent: marks stay text).
 * opts.maxCite: the highest citation number (marks above it stay text).
 * opts.headingOffset: added to heading levels (default 2: `#` becomes h3).
 */
export function renderMarkdown(md, opts = {}) {
  const frag = document.createDocumentFragment();
  const lines = String(md).replace(/\r\n?/g, "\n").split("\n");
  const offset = opts.headingOffset ?? 2;
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) {
      i++;
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      const level = Math.min(heading[1].length + offset, 6);
      frag.append(h("h" + level, { class: "md-h" }, inline(heading[2], opts)));
      i++;
      continue;
    }
    if (/^```/.test(line)) {
      const body = [];
      i++;
      while (i < lines.length && !/^```/.test(lines[i])) body.push(lines[i++]);
      i++;
      frag.append(h("pre", { class: "md-code" }, h("code", {}, body.join("\n"))));
      continue;
    }
    if (/^>/.test(line)) {
      const body = [];
      while (i < lines.length && /^>/.test(lines[i])) body.push(lines[i++].replace(/^> ?/, ""));
      frag.append(h("blockquote", { class: "md-quote" }, h("p", {}, body.join("\n"))));
      continue;
    }
    if (/^\s*[-*+]\s+/.test(line)) {
      const list = h("ul", { class: "md-list" });
      while (i < lines.length && /^\s*[-*+]\s+/.test(lines[i])) {
        list.append(h("li", {}, inline(lines[i++].replace(/^\s*[-*+]\s+/, ""), opts)));
      }
      frag.append(list);
      continue;
    }
    const p = h("p", { class: "md-p" });
    let first = true;
    while (i < lines.length && lines[i].trim() && !/^(#{1,6}\s|>|```|\s*[-*+]\s)/.test(lines[i])) {
      if (!first) p.append(h("br"));
      p.append(...inline(lines[i++], opts));
      first = false;
    }
    frag.append(p);
  }
  return frag;
}

/** Inline markup of one line, as an array of nodes and strings. */
export function inline(text, opts = {}) {
  const out = [];
  let last = 0;
  INLINE.lastIndex = 0;
  for (let m; (m = INLINE.exec(text));) {
    if (m.index > last) out.push(text.slice(last, m.index));
    last = INLINE.lastIndex;
    if (m[1] !== undefined) {
      const href = opts.refHref ? opts.refHref(m[1]) : null;
      const code = h("code", {}, m[1]);
      out.push(href ? h("a", { href, class: "ref" }, code) : code);
    } else if (m[2] !== undefined) {
      out.push(h("strong", {}, m[2]));
    } else {
      const n = Number(m[3]);
      if (opts.onCite && n >= 1 && n <= (opts.maxCite ?? 0)) {
        out.push(h("button", {
          type: "button", class: "cite-mark", "aria-label": `citation ${n}`,
          onclick: () => opts.onCite(n),
        }, `[${n}]`));
      } else {
        out.push(m[0]);
      }
    }
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}
