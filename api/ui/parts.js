// Pieces the inspector's pages share: headings, sections, errors and the flash line, ref
// links, tables, the two-step confirmation, the forget report, evidence shown on demand.

import { h, add, put, date, dl, chip } from "./dom.js";
import { api, getScope, partition, refHref, parseRef } from "./api.js";

/** Longest text shown before "Show all" (chunks, evidence previews). */
export const PREVIEW = 320;

export const TRUST = {
  document: "document",
  user_reported: "user said",
  agent_output: "assistant said (unverified)",
  tool_output: "tool output",
  third_party_agent: "third-party agent (approved)",
  system: "system message",
};

export function flash(message, kind) {
  const flashBox = document.getElementById("flash");
  flashBox.className = "flash " + (kind || "ok");
  put(flashBox, h("p", {}, message));
}

export function errorBox(err) {
  const box = h("div", { class: "error", role: "alert" }, h("p", {}, String(err)));
  if (err && (err.code === "unauthorized" || err.code === "scope_forbidden")) {
    box.append(h("p", {}, "Enter an API key that reaches this scope in the scope bar above."));
    document.getElementById("scope-details").open = true;
  }
  return box;
}

export function title(view, text, lede) {
  document.title = text + " · Cairn inspector";
  return add(view, [h("h1", { tabindex: -1 }, text), lede ? h("p", { class: "lede" }, lede) : null]);
}

export function refLink(ref) {
  const href = refHref(ref);
  const code = h("code", {}, ref);
  return href ? h("a", { href, class: "ref" }, code) : code;
}

export function trustChip(origin) {
  return chip(TRUST[origin] || origin, "trust trust-" + origin);
}

export function section(label, ...children) {
  const id = "s-" + label.toLowerCase().replace(/[^a-z0-9]+/g, "-");
  return h("section", { class: "card", "aria-labelledby": id }, h("h2", { id }, label), children);
}

export function tableWrap(table) {
  return h("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": "scrollable table" }, table);
}

/** A table that turns into one block per row on a narrow screen (each cell labelled with its
 * column's heading), in a scrollable region. */
export function stackWrap(table) {
  const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const tr of table.querySelectorAll("tbody tr")) {
    [...tr.children].forEach((td, i) => {
      if (heads[i]) td.setAttribute("data-label", heads[i]);
    });
  }
  table.classList.add("stack");
  return tableWrap(table);
}

export function refList(refs) {
  if (!refs || !refs.length) return "none";
  return h("ul", { class: "refs" }, refs.map((r) => h("li", {}, refLink(r))));
}

/** What a forget did: removed, invalidated, narrowed, tombstoned. */
export function forgetReport(report) {
  const removed = report.removed || [];
  return h("div", { class: "report", "data-report": "forget" },
    h("h3", {}, "Forgotten: ", h("code", {}, report.ref), report.hard ? " (hard)" : ""),
    dl([
      [`Removed (${removed.length})`, removed.length > 8
        ? h("details", {}, h("summary", {}, `${removed.length} refs`), refList(removed))
        : refList(removed)],
      [`Invalidated (${report.invalidated.length})`, refList(report.invalidated)],
      [`Narrowed (${report.narrowed.length})`, refList(report.narrowed)],
      [`Tombstoned turns (${report.tombstoned_turns.length})`, refList(report.tombstoned_turns)],
    ]));
}

/** A button that asks once more before doing something that cannot be undone. */
export function confirmButton(label, confirmLabel, action, { withHard } = {}) {
  const wrap = h("span", { class: "confirm" });
  const start = h("button", { type: "button", class: "danger" }, label);
  wrap.append(start);
  start.addEventListener("click", () => {
    const hard = h("input", { type: "checkbox" });
    const yes = h("button", { type: "button", class: "danger" }, confirmLabel);
    const no = h("button", { type: "button", class: "secondary" }, "Cancel");
    const parts = [yes, no];
    if (withHard) parts.push(h("label", { class: "inline" }, hard, " hard (also delete invalidated candidates)"));
    put(wrap, ...parts);
    yes.focus();
    no.addEventListener("click", () => {
      put(wrap, start);
      start.focus();
    });
    yes.addEventListener("click", async () => {
      yes.disabled = true;
      no.disabled = true;
      try {
        await action(hard.checked);
      } finally {
        if (wrap.isConnected) put(wrap, start);
      }
    });
  });
  return wrap;
}

export function pager(base, offset, limit, total) {
  if (total <= limit) return null;
  const at = (n) => `${base}${base.includes("?") ? "&" : "?"}offset=${n}`;
  return h("p", { class: "row pager" },
    offset > 0 ? h("a", { href: at(Math.max(0, offset - limit)) }, "← previous") : null,
    ` ${offset + 1}–${Math.min(offset + limit, total)} of ${total} `,
    offset + limit < total ? h("a", { href: at(offset + limit) }, "next →") : null);
}

/** An evidence ref, expanded inline on demand (document, message, event or fact). */
export function evidence(ref, summary) {
  const body = h("div", { class: "evidence-body" }, h("p", { class: "muted" }, "Loading…"));
  const details = h("details", { "data-evidence": ref }, h("summary", {}, summary || h("code", {}, ref)), body);
  let loaded = false;
  details.addEventListener("toggle", async () => {
    if (!details.open || loaded) return;
    loaded = true;
    try {
      put(body, await evidenceView(ref));
    } catch (err) {
      put(body, errorBox(err));
    }
  });
  return details;
}

export async function evidenceView(ref) {
  const r = parseRef(ref);
  const href = refHref(ref);
  const open = href ? h("p", {}, h("a", { href }, "Open source")) : null;
  if (r && r.kind === "doc") {
    const d = await api("GET", `/v1/documents/${encodeURIComponent(r.id)}`, { query: partition() });
    let text = null;
    if (r.chunk != null && /^\d+$/.test(r.chunk)) {
      const page = await api("GET", `/v1/documents/${encodeURIComponent(r.id)}/chunks`,
        { query: { ...partition(), limit: 1, offset: Number(r.chunk) } });
      const c = page.chunks.find((x) => x.ref === ref);
      text = c ? h("p", { class: "pre" }, c.text.length > PREVIEW ? c.text.slice(0, PREVIEW).trimEnd() + " …" : c.text)
        : h("p", { class: "muted" }, "That chunk is not in the current version.");
    }
    return h("div", {}, dl([["Document", d.source], ["Version", String(d.version)], ["Chunks", String(d.chunks)],
      ["Chunk", r.chunk], ["Ingested", date(d.ingested_at)]], "facts compact"), text, open);
  }
  if (r && r.kind === "msg") {
    const page = await api("GET", `/v1/conversations/${encodeURIComponent(r.conversation)}/messages`, { query: { ...partition(), limit: 1000 } });
    const m = page.messages.find((x) => x.ref === ref);
    if (!m) return h("p", { class: "muted" }, "That message is no longer stored.");
    return h("div", {}, h("p", {}, m.role ? chip(m.role, "role") : null, " ", trustChip(m.trust_origin), " ", date(m.ts)),
      h("p", { class: "pre" }, m.content), open);
  }
  if (r && r.kind === "fact") {
    const f = await api("GET", `/v1/facts/${encodeURIComponent(r.id)}`, { query: partition() });
    return h("div", {}, h("p", {}, h("strong", {}, f.subject), " · ", h("code", {}, f.predicate), " · ", h("strong", {}, f.object),
      " ", chip(f.status, "status status-" + f.status)), open);
  }
  if (r && r.kind === "evt") {
    const e = await api("GET", `/v1/events/${encodeURIComponent(r.id)}`, { query: partition() });
    return h("div", {}, dl([["From agent", e.source_agent], ["Session", e.session], ["When", date(e.ts)]], "facts compact"),
      h("p", { class: "pre" }, e.content));
  }
  return h("p", { class: "muted" }, "No preview for this kind of ref.");
}

/** `POST /v1/forget` of one ref (`ent:`, `rel:`, `fact:`, `pref:`, `trace:` ...): shows the
 * report in `report` (when given) and a flash line; answers the report, or null on an error. */
export async function forgetRef(ref, report, hard) {
  try {
    const r = await api("POST", "/v1/forget", { body: { scope: getScope(), ref, hard: !!hard } });
    if (report) put(report, section("Forget result", forgetReport(r)));
    flash(`Forgot ${ref}: ${r.removed.length} ref(s) removed` +
      (r.invalidated.length ? `, ${r.invalidated.length} invalidated` : "") + ".");
    return r;
  } catch (err) {
    if (report) put(report, errorBox(err));
    else flash(String(err), "error");
    return null;
  }
}
