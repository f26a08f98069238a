// Cairn inspector: one page at a time, chosen by the URL's hash (#/recall, #/documents,
// #/conversations, #/review, #/entities, #/facts, #/preferences, #/traces, #/grants,
// #/health). Plain modules, no framework, nothing loaded from elsewhere. Every text from the
// server goes into the page as text.

import { h, put, field, date, dl, chip, visible } from "./dom.js";
import {
  api, upload, getKey, setKey, getScope, setScope, partition, refHref, SCOPE_FIELDS,
} from "./api.js";
import { renderMarkdown } from "./markdown.js";
import {
  PREVIEW, flash, errorBox, title, refLink, trustChip, section, tableWrap, refList, forgetReport,
  confirmButton, pager, evidence,
} from "./parts.js";
import { pageEntities, pageFacts, pagePreferences } from "./knowledge.js";
import { pageTraces } from "./traces.js";

const OPERATIONS = [
  "recall", "read", "write_documents", "write_messages", "complete_turn", "propose",
  "decide_candidates", "forget",
];

const main = document.getElementById("main");
const flashBox = document.getElementById("flash");

// What this tab has seen: the last recall, upload warnings.
const recallState = { query: "", budget: 1000, pack: null };
const uploadWarnings = new Map();

// ---------------------------------------------------------------------------------------
// Recall playground

function pageRecall(view) {
  title(view, "Recall playground",
    "What an agent would be told for a query in this scope: the MemoryPack's Markdown as the agent sees it, beside the data behind each item.");
  const query = h("input", { type: "search", id: "recall-query", name: "query", required: true, maxlength: 8192, value: recallState.query });
  const budget = h("input", { type: "range", id: "recall-budget", name: "budget", min: 100, max: 4000, step: 50, value: String(recallState.budget) });
  const shown = h("output", { for: "recall-budget", id: "recall-budget-value" }, `${recallState.budget} tokens`);
  budget.addEventListener("input", () => {
    shown.textContent = `${budget.value} tokens`;
  });
  const result = h("div", { id: "recall-result" });
  const submit = h("button", { type: "submit" }, "Recall");
  const form = h("form", { class: "card form", id: "recall-form" },
    field("Query", query),
    field("Token budget", h("span", { class: "row" }, budget, shown)),
    h("div", { class: "row" }, submit));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    recallState.query = query.value;
    recallState.budget = Number(budget.value);
    submit.disabled = true;
    put(result, h("p", { class: "muted" }, "Recalling…"));
    try {
      const pack = await api("POST", "/v1/recall", {
        body: { scope: getScope(), query: query.value, token_budget: Number(budget.value) },
      });
      recallState.pack = pack;
      showPack(result, pack);
    } catch (err) {
      recallState.pack = null;
      put(result, errorBox(err));
    } finally {
      submit.disabled = false;
    }
  });
  view.append(form, result);
  if (recallState.pack) showPack(result, recallState.pack);
}

function showPack(container, pack) {
  const nodes = new Map(pack.selected_nodes.map((s) => [s.citation, s]));
  const focusCite = (n) => {
    const el = document.getElementById("cite-" + n);
    if (el) {
      el.scrollIntoView({ block: "nearest" });
      el.focus();
    }
  };
  const markdown = h("div", { class: "markdown", id: "pack-markdown" },
    renderMarkdown(pack.context_markdown, { refHref, onCite: focusCite, maxCite: pack.citations.length }));
  const left = h("section", { class: "card pack-md", "aria-labelledby": "pack-md-h" },
    h("h2", { id: "pack-md-h" }, "As the agent sees it"), markdown);

  const over = pack.token_count > pack.token_budget;
  const summary = dl([
    ["Coverage", chip(pack.coverage, "coverage cov-" + pack.coverage)],
    ["Tokens", h("span", { class: "tokens" },
      h("meter", { min: 0, max: Math.max(pack.token_budget, 1), value: pack.token_count, optimum: 0, high: pack.token_budget * 0.9, "aria-label": "tokens used" }),
      ` ${pack.token_count} / ${pack.token_budget}`, over ? " (over budget)" : "")],
    ["Scope", `${pack.identity_scope.tenant} / ${pack.identity_scope.user} / ${pack.identity_scope.namespace}`],
    ["Items", String(pack.citations.length)],
  ], "facts summary");
  summary.id = "pack-summary";

  const items = h("ol", { class: "items", id: "pack-items" });
  for (const c of pack.citations) items.append(citationCard(c, nodes.get(c.n)));
  if (!pack.citations.length) items.append(h("li", { class: "muted" }, "Nothing was selected."));

  const conflicts = h("div", { id: "pack-conflicts" });
  if (!pack.conflicts.length) conflicts.append(h("p", { class: "muted" }, "None."));
  for (const c of pack.conflicts) {
    conflicts.append(h("div", { class: "conflict" }, h("h4", {}, c.topic),
      h("div", { class: "sides" }, c.sides.map((s) => h("div", { class: "side" },
        h("p", {}, h("button", { type: "button", class: "cite-mark", onclick: () => focusCite(s.citation) }, `[${s.citation}]`),
          " ", h("strong", {}, s.value)),
        h("p", { class: "pre" }, s.statement),
        h("p", {}, trustChip(s.trust_origin), " ", date(s.timestamp)))))));
  }
  const unknowns = pack.unknowns.length
    ? h("ul", { id: "pack-unknowns" }, pack.unknowns.map((u) => h("li", {}, u)))
    : h("p", { class: "muted", id: "pack-unknowns" }, "None.");

  const right = h("section", { class: "card pack-data", "aria-labelledby": "pack-data-h" },
    h("h2", { id: "pack-data-h" }, "Why this pack"), summary,
    h("h3", {}, "Selected items"), items,
    h("h3", {}, "Conflicts"), conflicts,
    h("h3", {}, "Unknowns"), unknowns);
  put(container, h("div", { class: "split" }, left, right));
}

function citationCard(c, node) {
  const why = [];
  if (node) {
    const r = node.reason;
    why.push(h("li", {}, `fused score ${r.fused_score.toFixed(4)}`));
    if (r.dense_rank != null) {
      why.push(h("li", {}, `dense rank #${r.dense_rank}` + (r.dense_score != null ? ` (cosine ${r.dense_score.toFixed(3)})` : "")));
    } else why.push(h("li", {}, "not in the dense results"));
    why.push(h("li", {}, r.sparse_rank != null ? `sparse (BM25) rank #${r.sparse_rank}` : "not in the sparse results"));
    why.push(h("li", {}, r.identifier_hits.length ? ["identifier hits: ", r.identifier_hits.map((x, i) => [i ? ", " : "", h("code", {}, x)])] : "no identifier hits"));
    if (node.truncated) why.push(h("li", {}, "excerpt: cut to fit the budget"));
  }
  const href = refHref(c.ref);
  return h("li", {},
    h("article", { class: "item", id: "cite-" + c.n, tabindex: -1, "data-ref": c.ref },
      h("h4", {}, `[${c.n}] `, refLink(c.ref)),
      h("p", { class: "chips" }, chip(c.kind, "kind"), trustChip(c.trust_origin)),
      dl([
        ["Score", c.score.toFixed(4)],
        ["Source", c.source],
        ["Page", c.page],
        ["Span", c.span ? `${c.span[0]}–${c.span[1]}` : null],
        ["Turn", c.turn_id],
        ["Role", c.role],
        ["When", date(c.timestamp)],
      ]),
      why.length ? [h("p", { class: "why-h" }, "Why selected"), h("ul", { class: "why" }, why)] : null,
      node ? h("details", {}, h("summary", {}, "Text"), h("p", { class: "pre" }, node.text)) : null,
      href ? h("p", {}, h("a", { href, class: "source-link" }, "Open source")) : null));
}

// ---------------------------------------------------------------------------------------
// Documents

async function pageDocuments(view, args, params) {
  if (args[0]) return pageDocument(view, args[0], params);
  title(view, "Documents", "The scope's documents (current versions). Upload text, Markdown or PDF files; forgetting a document removes its chunks and what was derived from them.");
  const input = h("input", { type: "file", id: "upload-input", multiple: true, accept: ".md,.markdown,.txt,.pdf,text/plain,text/markdown,application/pdf" });
  const results = h("ul", { class: "upload-results", id: "upload-results", "aria-live": "polite" });
  const zone = h("div", { class: "dropzone", id: "dropzone" },
    h("p", {}, "Drop files here, or choose them:"), field("Files (txt, md, pdf)", input));
  const list = h("div", { id: "documents-list" });
  const report = h("div", { id: "documents-report", "aria-live": "polite" });
  const offset = Math.max(0, Number(params.get("offset")) || 0);

  const reload = () => loadDocuments(list, report, offset);
  const uploadAll = async (files) => {
    for (const file of files) {
      const progress = h("progress", { max: 1, value: 0, "aria-label": "upload of " + file.name });
      const status = h("span", { class: "status" }, "uploading…");
      const li = h("li", { "data-file": file.name }, h("strong", {}, file.name), " ", progress, " ", status);
      results.append(li);
      try {
        const r = await upload(file, (p) => {
          progress.value = p;
        });
        if (r.warnings.length) uploadWarnings.set(r.doc_id, r.warnings);
        progress.value = 1;
        put(status, chip(r.status, "status-" + r.status), " ",
          h("a", { href: `#/documents/${encodeURIComponent(r.doc_id)}` }, `version ${r.version}, ${r.chunks} chunks`),
          r.warnings.length ? h("ul", { class: "warnings" }, r.warnings.map((w) => h("li", {}, w))) : null);
        li.className = "ok";
      } catch (err) {
        progress.remove();
        put(status, errorBox(err));
        li.className = "failed";
      }
    }
    await reload();
  };
  input.addEventListener("change", () => {
    const files = [...input.files];
    input.value = "";
    uploadAll(files);
  });
  zone.addEventListener("dragover", (e) => {
    e.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    uploadAll([...e.dataTransfer.files]);
  });
  view.append(section("Upload", zone, results), report, section("Stored documents", list));
  await reload();
}

async function loadDocuments(list, report, offset) {
  const limit = 100;
  let data;
  try {
    data = await api("GET", "/v1/documents", { query: { ...partition(), limit, offset } });
  } catch (err) {
    put(list, errorBox(err));
    return;
  }
  if (!data.documents.length) {
    put(list, h("p", { class: "muted", id: "documents-empty" }, "No documents in this scope."));
    return;
  }
  const rows = data.documents.map((d) => {
    const warnings = uploadWarnings.get(d.doc_id);
    return h("tr", { "data-doc": d.doc_id },
      h("td", {}, h("a", { href: `#/documents/${encodeURIComponent(d.doc_id)}` }, d.source),
        warnings ? h("span", { class: "warn", title: warnings.join("\n") }, ` ⚠ ${warnings.length} warning(s)`) : null),
      h("td", { class: "num" }, String(d.version)),
      h("td", { class: "num" }, String(d.chunks)),
      h("td", { class: "wide-only" }, d.media_type || "—"),
      h("td", { class: "wide-only" }, date(d.ingested_at)),
      h("td", {}, confirmButton("Forget", "Forget " + d.source, async (hard) => {
        await forgetDocument(d.doc_id, hard, report);
        await loadDocuments(list, report, offset);
      }, { withHard: true })));
  });
  const table = h("table", { id: "documents-table" },
    h("caption", {}, `${data.total} document(s)`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Source"), h("th", { scope: "col", class: "num" }, "Version"),
      h("th", { scope: "col", class: "num" }, "Chunks"), h("th", { scope: "col", class: "wide-only" }, "Type"),
      h("th", { scope: "col", class: "wide-only" }, "Ingested"), h("th", { scope: "col" }, "Actions"))),
    h("tbody", {}, rows));
  put(list, tableWrap(table), pager("#/documents", offset, limit, data.total));
}

async function forgetDocument(docId, hard, report) {
  try {
    // The same forget as `DELETE /v1/documents/{id}`, answered with the whole report (what
    // was removed and which candidates it invalidated or narrowed).
    const r = await api("POST", "/v1/forget", { body: { scope: getScope(), ref: "doc:" + docId, hard } });
    put(report, section("Forget result", forgetReport(r)));
    flash(`Forgot doc:${docId}: ${r.removed.length} ref(s) removed, ${r.invalidated.length} candidate(s) invalidated.`);
  } catch (err) {
    put(report, errorBox(err));
  }
}

async function pageDocument(view, id, params) {
  title(view, "Document");
  const body = h("div", { id: "document-view" });
  const report = h("div", { id: "documents-report", "aria-live": "polite" });
  view.append(h("p", {}, h("a", { href: "#/documents" }, "← all documents")), body, report);
  let d;
  try {
    d = await api("GET", `/v1/documents/${encodeURIComponent(id)}`, { query: partition() });
  } catch (err) {
    body.append(errorBox(err));
    if (err.code === "not_found") body.append(h("p", {}, "It is not in this scope; it may have been forgotten."));
    return;
  }
  view.querySelector("h1").textContent = "Document: " + visible(d.source);
  const warnings = uploadWarnings.get(d.doc_id);
  body.append(section("Stored version", dl([
    ["Source", d.source],
    ["Document id", h("code", {}, d.doc_id)],
    ["Ref", h("code", {}, "doc:" + d.doc_id)],
    ["Version", String(d.version)],
    ["Chunks", String(d.chunks)],
    ["Media type", d.media_type],
    ["Ingested", date(d.ingested_at)],
    ["Warnings (this tab's upload)", warnings ? h("ul", {}, warnings.map((w) => h("li", {}, w))) : null],
  ])));
  const chunks = h("div", { id: "chunks-view" }, h("p", { class: "muted" }, "Loading chunks…"));
  body.append(section("Chunks", chunks));
  body.append(section("Forget", h("p", {}, "Removes every chunk of this document; candidates citing only it are invalidated (their memories leave recall)."),
    confirmButton("Forget this document", "Forget " + d.source, async (hard) => {
      await forgetDocument(d.doc_id, hard, report);
    }, { withHard: true })));
  await loadChunks(chunks, d.doc_id, params);
}

const CHUNKS_PAGE = 100;

/** One page of a document's chunks; `?chunk=<n>` (a citation) opens the page holding it. */
async function loadChunks(box, docId, params) {
  const raw = params.get("chunk");
  const chunk = raw != null && /^\d+$/.test(raw) ? Number(raw) : null;
  const offset = params.has("offset") ? Math.max(0, Number(params.get("offset")) || 0)
    : chunk != null ? chunk - (chunk % CHUNKS_PAGE) : 0;
  let data;
  try {
    data = await api("GET", `/v1/documents/${encodeURIComponent(docId)}/chunks`,
      { query: { ...partition(), limit: CHUNKS_PAGE, offset } });
  } catch (err) {
    put(box, errorBox(err));
    return;
  }
  const pack = recallState.pack;
  const list = h("ol", { class: "chunks", id: "chunks" }, data.chunks.map((c) => {
    const cited = pack && pack.citations.find((x) => x.ref === c.ref);
    return h("li", {}, chunkCard(c, c.chunk_index === chunk, cited));
  }));
  if (!data.chunks.length) list.append(h("li", { class: "muted" }, "No chunks."));
  put(box, h("p", { class: "muted" }, `${data.total} chunk(s) in the current version.`), list,
    pager(`#/documents/${encodeURIComponent(docId)}`, offset, CHUNKS_PAGE, data.total));
  if (chunk == null) return;
  const target = document.getElementById("chunk-" + chunk);
  if (!target) {
    box.prepend(h("p", { class: "error", role: "alert" }, `Chunk ${chunk} is not in the current version of this document.`));
    return;
  }
  target.scrollIntoView({ block: "center" });
  target.focus();
}

function chunkCard(c, highlight, cited) {
  const long = c.text.length > PREVIEW;
  const cut = () => c.text.slice(0, PREVIEW).trimEnd() + " …";
  const text = h("p", { class: "pre content" }, long && !highlight ? cut() : c.text);
  let toggle = null;
  if (long) {
    toggle = h("button", { type: "button", class: "secondary small", "aria-expanded": String(highlight) },
      highlight ? "Show less" : `Show all ${c.text.length} characters`);
    toggle.addEventListener("click", () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      text.textContent = visible(open ? c.text : cut());
      toggle.textContent = open ? "Show less" : `Show all ${c.text.length} characters`;
      toggle.setAttribute("aria-expanded", String(open));
    });
  }
  return h("article", { class: "chunk" + (highlight ? " highlight" : ""), id: "chunk-" + c.chunk_index, tabindex: -1, "data-ref": c.ref },
    h("header", {}, h("code", {}, c.ref),
      cited ? [" ", chip(`cited [${cited.n}] in the last recall`, "cited")] : null),
    dl([
      ["Page", c.page != null ? String(c.page) : null],
      ["Span", c.span ? `${c.span[0]}–${c.span[1]}` : null],
      ["Heading", c.heading],
    ], "facts compact"),
    text, toggle);
}

// ---------------------------------------------------------------------------------------
// Conversations

async function pageConversations(view, args, params) {
  title(view, "Conversations", "The scope's conversations, most recent first. A conversation's messages in order, with their turn ids and trust origins. Forgetting a message or a conversation shows what the cascade removed, invalidated or narrowed.");
  const idInput = h("input", { id: "conversation-id", name: "conversation", required: true, spellcheck: "false", value: args[0] || "" });
  const form = h("form", { class: "card form row", id: "conversation-form" },
    field("Conversation id", idInput), h("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = `#/conversations/${encodeURIComponent(idInput.value.trim())}`;
  });
  view.append(form);
  if (!args[0]) {
    const list = h("div", { id: "conversations-list" }, h("p", { class: "muted" }, "Loading…"));
    view.append(section("Stored conversations", list));
    await loadConversations(list, Math.max(0, Number(params.get("offset")) || 0));
    return;
  }
  view.append(h("p", {}, h("a", { href: "#/conversations" }, "← all conversations")));
  const id = args[0];
  const report = h("div", { id: "conversation-report", "aria-live": "polite" });
  const list = h("div", { id: "conversation-view" });
  view.append(report, list);
  const offset = Math.max(0, Number(params.get("offset")) || 0);
  const load = async () => {
    let page;
    try {
      page = await api("GET", `/v1/conversations/${encodeURIComponent(id)}/messages`, { query: { ...partition(), limit: 200, offset } });
    } catch (err) {
      put(list, errorBox(err));
      return;
    }
    const msgs = h("ol", { class: "messages", id: "messages" });
    for (const m of page.messages) {
      msgs.append(h("li", {},
        h("article", { class: "message role-" + (m.role || "none"), id: "msg-" + m.seq, tabindex: -1, "data-ref": m.ref },
          h("header", {}, h("code", {}, m.ref), " ", m.role ? chip(m.role, "role") : null, " ", trustChip(m.trust_origin)),
          h("p", { class: "pre content" }, m.content),
          dl([["Turn", m.turn_id], ["Agent", m.agent], ["Session", m.session], ["When", date(m.ts)]], "facts compact"),
          confirmButton("Forget message", "Forget " + m.ref, async (hard) => {
            try {
              const r = await api("DELETE", `/v1/messages/${encodeURIComponent(m.ref)}`, { query: { ...partition(), hard } });
              put(report, section("Forget result", forgetReport(r)));
              flash(`Forgot ${m.ref}.`);
            } catch (err) {
              put(report, errorBox(err));
            }
            await load();
          }, { withHard: true }))));
    }
    if (!page.messages.length) msgs.append(h("li", { class: "muted" }, "No messages."));
    put(list, section(`Conversation ${page.conversation_id} (${page.total} messages)`, msgs,
      pager(`#/conversations/${encodeURIComponent(id)}`, offset, 200, page.total),
      h("p", {}, confirmButton("Forget the whole conversation", "Forget conversation " + id, async (hard) => {
        try {
          const r = await api("DELETE", `/v1/conversations/${encodeURIComponent(id)}`, { query: { ...partition(), hard } });
          put(report, section("Forget result", forgetReport(r)));
          flash(`Forgot conversation ${id}.`);
        } catch (err) {
          put(report, errorBox(err));
        }
        await load();
      }, { withHard: true }))));
    const seq = params.get("seq");
    const target = seq != null && document.getElementById("msg-" + seq);
    if (target) {
      target.classList.add("highlight");
      target.scrollIntoView({ block: "center" });
      target.focus();
    }
  };
  await load();
}

/** The scope's conversations, most recent activity first, one page of them. */
async function loadConversations(box, offset) {
  const limit = 100;
  let data;
  try {
    data = await api("GET", "/v1/conversations", { query: { ...partition(), limit, offset } });
  } catch (err) {
    put(box, errorBox(err));
    return;
  }
  if (!data.conversations.length) {
    put(box, h("p", { class: "muted", id: "conversations-empty" }, "No conversations in this scope."));
    return;
  }
  const rows = data.conversations.map((c) => h("tr", { "data-conversation": c.conversation_id },
    h("td", {}, h("a", { href: `#/conversations/${encodeURIComponent(c.conversation_id)}` }, c.conversation_id)),
    h("td", { class: "num" }, String(c.messages)),
    h("td", { class: "wide-only" }, date(c.first_ts)),
    h("td", {}, date(c.last_ts))));
  const table = h("table", { id: "conversations-table" },
    h("caption", {}, `${data.total} conversation(s)`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Conversation"), h("th", { scope: "col", class: "num" }, "Messages"),
      h("th", { scope: "col", class: "wide-only" }, "First message"), h("th", { scope: "col" }, "Last message"))),
    h("tbody", {}, rows));
  put(box, tableWrap(table), pager("#/conversations", offset, limit, data.total));
}

// ---------------------------------------------------------------------------------------
// Review queue

async function pageReview(view, args) {
  if (args[0]) return pageCandidate(view, args[0]);
  title(view, "Review queue", "Candidate memories proposed by third-party agents. Approving one makes it a searchable memory (mem:), cited as \"third-party agent (approved)\".");
  const pending = h("div", { id: "pending" });
  const history = h("div", { id: "history" });
  const status = h("select", { id: "history-status" },
    ["approved", "rejected", "invalidated"].map((s) => h("option", { value: s }, s)));
  const reload = async () => {
    await loadCandidates(pending, "pending", reload);
    await loadCandidates(history, status.value, reload);
  };
  status.addEventListener("change", () => loadCandidates(history, status.value, reload));
  view.append(section("Pending", pending), section("History", field("Status", status), history));
  await reload();
}

async function loadCandidates(box, status, onDecided) {
  let data;
  try {
    data = await api("GET", "/v1/candidates", { query: { ...partition(), status, limit: 100 } });
  } catch (err) {
    put(box, errorBox(err));
    return;
  }
  put(box, data.candidates.length
    ? h("ul", { class: "candidates" }, data.candidates.map((c) => h("li", {}, candidateCard(c, onDecided))))
    : h("p", { class: "muted" }, `No ${status} candidates.`),
    data.total > data.candidates.length ? h("p", { class: "muted" }, `Showing ${data.candidates.length} of ${data.total}.`) : null);
}

function candidateCard(c, onDecided) {
  const card = h("article", { class: "candidate cand-" + c.status, id: "cand-" + c.candidate_id, "data-ref": c.ref },
    h("header", {}, chip(c.status, "status status-" + c.status), " ", chip(c.memory_type, "kind"),
      ` from ${c.source_agent} · confidence ${Number(c.confidence).toFixed(2)}`),
    h("p", { class: "pre content" }, c.content),
    dl([
      ["Ref", h("code", {}, c.ref)],
      ["Proposed", date(c.proposed_at)],
      ["Decided", c.decided_at != null ? date(c.decided_at) : null],
      ["Note", c.note],
      ["Memory", c.memory_ref ? refLink(c.memory_ref) : null],
      ["Invalidated by", c.invalidated_by.length ? refList(c.invalidated_by) : null],
    ], "facts compact"),
    h("h3", { class: "small" }, "Evidence"),
    h("ul", { class: "evidence" }, c.evidence_refs.map((r) => h("li", {}, evidence(r)))));
  if (c.status === "pending") {
    const note = h("textarea", { rows: 2, maxlength: 1024, name: "note" });
    const decide = async (action, button) => {
      button.disabled = true;
      try {
        const updated = await api("POST", `/v1/candidates/${encodeURIComponent(c.candidate_id)}/${action}`,
          { body: { scope: getScope(), note: note.value.trim() || null } });
        flash(`${action === "approve" ? "Approved" : "Rejected"} ${updated.ref}` +
          (updated.memory_ref ? ` → ${updated.memory_ref}` : "") + ".");
        if (onDecided) await onDecided(updated);
      } catch (err) {
        card.append(errorBox(err));
        button.disabled = false;
      }
    };
    const approve = h("button", { type: "button", class: "approve" }, "Approve");
    const reject = h("button", { type: "button", class: "danger" }, "Reject");
    approve.addEventListener("click", () => decide("approve", approve));
    reject.addEventListener("click", () => decide("reject", reject));
    card.append(h("div", { class: "decide" }, field("Note (kept with the decision)", note), h("div", { class: "row" }, approve, reject)));
  }
  return card;
}

async function pageCandidate(view, id) {
  title(view, "Candidate");
  view.append(h("p", {}, h("a", { href: "#/review" }, "← review queue")));
  const box = h("div", { id: "candidate-view" });
  view.append(box);
  const load = async () => {
    try {
      const c = await api("GET", `/v1/candidates/${encodeURIComponent(id)}`, { query: partition() });
      put(box, candidateCard(c, load));
    } catch (err) {
      put(box, errorBox(err));
    }
  };
  await load();
}

async function pageEvent(view, args) {
  title(view, "Event");
  const e = await api("GET", `/v1/events/${encodeURIComponent(args[0] || "")}`, { query: partition() });
  view.append(section(e.ref, dl([["From agent", e.source_agent], ["Session", e.session], ["When", date(e.ts)]]),
    h("p", { class: "pre" }, e.content)));
}

// ---------------------------------------------------------------------------------------
// Grants

async function pageGrants(view) {
  title(view, "Grants", "Agents with their own keys and the operations they may do in this user's memory. A change applies to the agent's very next request.");
  const list = h("div", { id: "grants-list" });
  const issued = h("div", { id: "grant-issued", "aria-live": "polite" });
  const agent = h("input", { name: "agent", required: true, pattern: "[A-Za-z0-9_.\\-]{1,128}", spellcheck: "false" });
  const preset = h("select", { name: "preset" }, h("option", { value: "" }, "none"),
    ["proposer", "assistant", "trusted"].map((p) => h("option", { value: p }, p)));
  const ops = OPERATIONS.map((op) => h("label", { class: "inline" }, h("input", { type: "checkbox", name: "op", value: op }), " " + op));
  const note = h("input", { name: "note", maxlength: 1024 });
  const form = h("form", { class: "form", id: "grant-form" },
    field("Agent", agent), field("Preset", preset),
    h("fieldset", { class: "ops" }, h("legend", {}, "Operations (added to the preset's)"), ops),
    field("Note", note), h("div", { class: "row" }, h("button", { type: "submit" }, "Issue grant")));
  const load = async () => {
    const s = getScope();
    let data;
    try {
      data = await api("GET", "/v1/grants", { query: { tenant: s.tenant, user: s.user } });
    } catch (err) {
      put(list, errorBox(err));
      return;
    }
    put(list, data.grants.length
      ? h("ul", { class: "grants" }, data.grants.map((g) => h("li", {}, grantCard(g, load))))
      : h("p", { class: "muted" }, "No grants for this user."));
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const s = getScope();
    const body = { tenant: s.tenant, user: s.user, agent: agent.value.trim() };
    if (preset.value) body.preset = preset.value;
    const chosen = ops.map((l) => l.querySelector("input")).filter((i) => i.checked).map((i) => i.value);
    if (chosen.length) body.operations = chosen;
    if (note.value.trim()) body.note = note.value.trim();
    try {
      const r = await api("POST", "/v1/grants", { body });
      const key = h("input", { readonly: true, value: r.key, id: "issued-key", class: "key" });
      const copy = h("button", { type: "button", class: "secondary" }, "Copy");
      copy.addEventListener("click", async () => {
        key.select();
        try {
          await navigator.clipboard.writeText(r.key);
          flash("Key copied.");
        } catch {
          flash("Select the key and copy it.", "error");
        }
      });
      put(issued, h("div", { class: "card keybox", role: "alert" },
        h("p", {}, h("strong", {}, `Key for ${r.grant.agent}: `), "shown once, Cairn keeps only its hash."),
        h("div", { class: "row" }, field("Agent key", key), copy)));
      form.reset();
      await load();
    } catch (err) {
      put(issued, errorBox(err));
    }
  });
  view.append(section("Issue a grant", form, issued), section("Grants", list));
  await load();
}

function grantCard(g, reload) {
  const note = h("input", { maxlength: 1024, name: "note" });
  const result = h("div", { "aria-live": "polite" });
  const change = (action) => async () => {
    try {
      await api("POST", `/v1/grants/${encodeURIComponent(g.agent)}/${action}`,
        { body: { tenant: g.tenant, user: g.user, note: note.value.trim() || null } });
      flash(`Grant of ${g.agent}: ${{ suspend: "suspended", revoke: "revoked", restore: "restored" }[action]}.`);
      await reload();
    } catch (err) {
      put(result, errorBox(err));
    }
  };
  const buttons = [];
  if (g.status === "active") buttons.push(h("button", { type: "button", class: "secondary", onclick: change("suspend") }, "Suspend"));
  if (g.status === "suspended") buttons.push(h("button", { type: "button", onclick: change("restore") }, "Restore"));
  if (g.status !== "revoked") buttons.push(confirmButton("Revoke", "Revoke " + g.agent + " (final)", change("revoke")));
  return h("article", { class: "grant", id: "grant-" + g.agent },
    h("header", {}, h("strong", {}, g.agent), " ", chip(g.status, "status status-" + g.status)),
    h("p", { class: "chips" }, g.operations.map((o) => chip(o, "op"))),
    h("details", {}, h("summary", {}, `History (${g.history.length})`),
      tableWrap(h("table", {}, h("thead", {}, h("tr", {}, ["Change", "By", "When", "Note"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, g.history.map((c) => h("tr", {}, h("td", {}, c.change), h("td", {}, h("code", {}, c.by)), h("td", {}, date(c.at)), h("td", {}, c.note || "—"))))))),
    buttons.length ? h("div", { class: "decide" }, field("Note", note), h("div", { class: "row" }, buttons)) : null,
    result);
}

// ---------------------------------------------------------------------------------------
// Health

async function pageHealth(view) {
  title(view, "Health", "Store and model readiness, what this scope holds, and request latency since the server started (from /metrics).");
  const box = h("div", { id: "health-view" });
  const refresh = h("button", { type: "button", class: "secondary" }, "Refresh");
  view.append(h("p", {}, refresh), box);
  const load = async () => {
    const parts = [];
    try {
      const live = await api("GET", "/healthz");
      const ready = await api("GET", "/readyz");
      parts.push(section("Readiness", dl([["Liveness", live.status], ["Readiness", chip(ready.status, "status-" + ready.status)],
        ["Model", h("code", {}, ready.model)], ["Points in the store", String(ready.points)]])));
    } catch (err) {
      parts.push(section("Readiness", errorBox(err)));
    }
    const p = partition();
    try {
      const n = await api("GET", "/v1/stats", { query: p });
      const count = (k) => h("span", { "data-count": k }, String(n[k]));
      parts.push(section("This scope", h("p", { class: "muted" }, `${p.tenant} / ${p.user} / ${p.namespace}`),
        h("div", { id: "scope-counts" }, dl([["Documents", count("documents")], ["Chunks", count("chunks")],
          ["Messages", count("messages")], ["Turns", count("turns")], ["Entities", count("entities")],
          ["Preferences", count("preferences")], ["Facts", count("facts")], ["Traces", count("traces")]]))));
    } catch (err) {
      parts.push(section("This scope", errorBox(err)));
    }
    try {
      parts.push(metricsView(parseMetrics(await api("GET", "/metrics", { text: true }))));
    } catch (err) {
      parts.push(section("Requests", errorBox(err)));
    }
    put(box, ...parts);
  };
  refresh.addEventListener("click", load);
  await load();
}

/** The request counters, latency histograms and named counters of Prometheus text. */
export function parseMetrics(text) {
  const routes = new Map();
  const counters = [];
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)$/;
  for (const raw of text.split("\n")) {
    const m = line.exec(raw.trim());
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(/(\w+)="([^"]*)"/g)) labels[l[1]] = l[2];
    const value = Number(m[3]);
    const key = `${labels.method} ${labels.route}`;
    const get = () => {
      if (!routes.has(key)) routes.set(key, { method: labels.method, route: labels.route, count: 0, sum: 0, errors: 0, buckets: [] });
      return routes.get(key);
    };
    if (m[1] === "cairn_http_requests_total") {
      if (Number(labels.status) >= 400) get().errors += value;
    } else if (m[1] === "cairn_http_request_duration_seconds_bucket") {
      get().buckets.push([labels.le === "+Inf" ? Infinity : Number(labels.le), value]);
    } else if (m[1] === "cairn_http_request_duration_seconds_sum") {
      get().sum = value;
    } else if (m[1] === "cairn_http_request_duration_seconds_count") {
      get().count = value;
    } else if (!m[2] && m[1].startsWith("cairn_")) {
      counters.push([m[1], value]);
    }
  }
  return { routes: [...routes.values()].sort((a, b) => b.count - a.count), counters };
}

function quantile(r, q) {
  const target = q * r.count;
  const b = r.buckets.slice().sort((x, y) => x[0] - y[0]).find(([, c]) => c >= target);
  if (!b) return "—";
  return b[0] === Infinity ? "> 10 s" : `≤ ${ms(b[0])}`;
}

function ms(seconds) {
  return seconds < 1 ? `${+(seconds * 1000).toFixed(1)} ms` : `${+seconds.toFixed(2)} s`;
}

function metricsView({ routes, counters }) {
  const rows = routes.filter((r) => r.count > 0).map((r) => h("tr", {},
    h("td", {}, h("code", {}, `${r.method} ${r.route}`)), h("td", { class: "num" }, String(r.count)),
    h("td", { class: "num" }, String(r.errors)), h("td", { class: "num" }, ms(r.sum / r.count)),
    h("td", { class: "num wide-only" }, quantile(r, 0.5)), h("td", { class: "num" }, quantile(r, 0.95))));
  return [
    section("Requests", tableWrap(h("table", { id: "latency-table" },
      h("caption", {}, "Per route since start; quantiles are histogram bucket bounds."),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Route"), h("th", { scope: "col", class: "num" }, "Requests"),
        h("th", { scope: "col", class: "num" }, "Errors"), h("th", { scope: "col", class: "num" }, "Mean"),
        h("th", { scope: "col", class: "num wide-only" }, "p50"), h("th", { scope: "col", class: "num" }, "p95"))),
      h("tbody", {}, rows)))),
    section("Counters", counters.length
      ? dl(counters.map(([name, v]) => [name, String(v)]))
      : h("p", { class: "muted" }, "None yet.")),
  ];
}

// ---------------------------------------------------------------------------------------
// Scope bar and routing

const PAGES = {
  recall: pageRecall,
  documents: pageDocuments,
  conversations: pageConversations,
  review: pageReview,
  entities: pageEntities,
  facts: pageFacts,
  preferences: pagePreferences,
  traces: pageTraces,
  grants: pageGrants,
  health: pageHealth,
  events: pageEvent,
};

function scopeBar() {
  const form = document.getElementById("scope-bar");
  const keyState = document.getElementById("key-state");
  const summary = document.getElementById("scope-summary");
  const show = () => {
    const s = getScope();
    summary.textContent = `${s.tenant} / ${s.user} / ${s.namespace}` + (getKey() ? " · key set" : "");
    keyState.textContent = getKey() ? "(set for this tab)" : "(none: loopback only)";
  };
  const s = getScope();
  for (const f of SCOPE_FIELDS) form.elements[f].value = s[f];
  form.elements.key.value = getKey();
  show();
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (!form.reportValidity()) return;
    const next = {};
    for (const f of SCOPE_FIELDS) next[f] = form.elements[f].value.trim();
    setScope(next);
    setKey(form.elements.key.value.trim());
    show();
    flash(`Scope: ${next.tenant} / ${next.user} / ${next.namespace}.`);
    document.getElementById("scope-details").open = false;
    route();
  });
  document.getElementById("clear-key").addEventListener("click", () => {
    setKey("");
    form.elements.key.value = "";
    show();
    flash("Key forgotten.");
  });
  // Open until a scope was applied in this tab (on a wide screen).
  document.getElementById("scope-details").open =
    !sessionStorage.getItem("cairn.inspector.scope") && !matchMedia("(max-width: 40em)").matches;
}

let first = true;

async function route() {
  const raw = location.hash.replace(/^#\/?/, "");
  const q = raw.indexOf("?");
  const path = q < 0 ? raw : raw.slice(0, q);
  const params = new URLSearchParams(q < 0 ? "" : raw.slice(q + 1));
  let segs;
  try {
    segs = path.split("/").filter(Boolean).map(decodeURIComponent);
  } catch {
    segs = [];
  }
  const name = PAGES[segs[0]] ? segs[0] : "recall";
  for (const a of document.querySelectorAll("nav a[data-page]")) {
    const here = a.dataset.page === name || (name === "events" && a.dataset.page === "review");
    if (here) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const view = h("div", { class: "page page-" + name });
  put(main, view);
  const done = PAGES[name](view, segs.slice(1), params);
  if (!first) {
    const heading = view.querySelector("h1");
    if (heading && !view.querySelector(".highlight")) heading.focus({ preventScroll: false });
  }
  first = false;
  try {
    await done;
  } catch (err) {
    view.append(errorBox(err));
  }
  if (view.isConnected) main.dataset.ready = name;
}

scopeBar();
// The skip link must not change the hash (that would route): it moves the focus.
document.getElementById("skip-link").addEventListener("click", (e) => {
  e.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", () => {
  put(flashBox);
  delete main.dataset.ready;
  route();
});
route();
