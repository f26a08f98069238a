// Knowledge pages: entities (search, type filter, aliases, merges, the neighbourhood graph),
// facts (what holds now per subject, a predicate's history with validity and supersession,
// open conflicts beside their evidence, declared cardinalities) and preferences by category.
// Each record can be forgotten (`POST /v1/forget` with its ref) after a confirmation.

import { h, put, field, date, dl, chip, visible } from "./dom.js";
import { api, partition } from "./api.js";
import {
  errorBox, title, refLink, section, stackWrap, confirmButton, pager, forgetRef, evidence,
} from "./parts.js";
import { neighbourhoodGraph, entityName, s } from "./graph.js";

export const ENTITY_TYPES = ["person", "organization", "location", "event", "object", "other"];
const PAGE = 100;
const MAX_GRAPH = 80; // nodes drawn; the table beneath lists every one

/** An in-app link: `#/path?k=v` (empty values left out). */
export function hashOf(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v != null && v !== "") q.set(k, String(v));
  const qs = q.toString();
  return path + (qs ? "?" + qs : "");
}

function num(params, name, lo, hi, dflt) {
  const n = Number(params.get(name));
  return Number.isInteger(n) && n >= lo && n <= hi ? n : dflt;
}

const enc = encodeURIComponent;

/** Runs `fn` over `items`, `width` at a time. */
async function pool(items, width, fn) {
  const queue = [...items];
  await Promise.all(Array.from({ length: Math.min(width, queue.length) }, async () => {
    while (queue.length) await fn(queue.shift());
  }));
}

// ---------------------------------------------------------------------------------------
// Entities

export async function pageEntities(view, args, params) {
  if (args[0]) return pageEntity(view, args[0], params);
  title(view, "Entities", "People, organizations, places, events and things this scope knows about, with their aliases. Search by meaning and name, or list them by type; open one for its relationships and its neighbourhood graph.");
  const q = (params.get("q") || "").trim();
  const type = ENTITY_TYPES.includes(params.get("type")) ? params.get("type") : "";
  const offset = num(params, "offset", 0, 1e9, 0);
  const query = h("input", { type: "search", id: "entity-q", name: "q", value: q, maxlength: 8192, spellcheck: "false" });
  const typeSel = h("select", { id: "entity-type", name: "type" }, h("option", { value: "" }, "any type"),
    ENTITY_TYPES.map((t) => h("option", { value: t, selected: t === type }, t)));
  const form = h("form", { class: "card form row", id: "entity-form", role: "search" },
    field("Search (name, alias, description)", query), field("Type", typeSel),
    h("button", { type: "submit" }, "Search"),
    q || type ? h("a", { href: "#/entities" }, "Clear") : null);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = hashOf("#/entities", { q: query.value.trim(), type: typeSel.value });
  });
  const report = h("div", { id: "entities-report", "aria-live": "polite" });
  const list = h("div", { id: "entities-list" }, h("p", { class: "muted" }, "Loading…"));
  view.append(form, report, section(q ? "Search results" : "Stored entities", list));
  const load = () => loadEntities(list, report, { q, type, offset }, load);
  await load();
}

async function loadEntities(list, report, { q, type, offset }, reload) {
  let rows;
  let caption;
  let more = null;
  try {
    if (q) {
      const data = await api("GET", "/v1/entities/search", { query: { ...partition(), q, type, limit: 50 } });
      rows = data.results.map((r) => ({ e: r.item, score: r.score }));
      caption = `${rows.length} best match(es) for “${q}”` + (type ? ` among ${type} entities` : "");
    } else {
      const data = await api("GET", "/v1/entities", { query: { ...partition(), type, limit: PAGE, offset } });
      rows = data.entities.map((e) => ({ e }));
      caption = `${data.total} ${type || ""} entit${data.total === 1 ? "y" : "ies"}`.replace("  ", " ");
      more = pager(hashOf("#/entities", { type }), offset, PAGE, data.total);
    }
  } catch (err) {
    put(list, errorBox(err));
    return;
  }
  if (!rows.length) {
    put(list, h("p", { class: "muted", id: "entities-empty" }, q ? "Nothing matches." : "No entities in this scope."));
    return;
  }
  const scored = rows.some((r) => r.score != null);
  const table = h("table", { id: "entities-table" }, h("caption", {}, caption),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Name"), h("th", { scope: "col" }, "Type"),
      h("th", { scope: "col" }, "Aliases"), h("th", { scope: "col", class: "wide-only" }, "Description"),
      scored ? h("th", { scope: "col", class: "num wide-only" }, "Score") : null, h("th", { scope: "col" }, "Actions"))),
    h("tbody", {}, rows.map(({ e, score }) => h("tr", { "data-entity": e.id, "data-type": e.type },
      h("td", {}, h("a", { href: `#/entities/${enc(e.id)}` }, entityName(e)),
        e.canonical_name && e.canonical_name !== e.name ? h("small", { class: "muted" }, ` (${e.name})`) : null),
      h("td", {}, chip(e.type, "kind type-" + e.type), e.subtype ? h("small", { class: "muted" }, " " + e.subtype) : null),
      h("td", {}, aliases(e.aliases)),
      h("td", { class: "wide-only" }, e.description || "—"),
      scored ? h("td", { class: "num wide-only" }, score.toFixed(4)) : null,
      h("td", {}, confirmButton("Forget", "Forget " + visible(entityName(e)), async () => {
        if (await forgetRef("ent:" + e.id, report)) await reload();
      }))))));
  put(list, stackWrap(table), more);
}

function aliases(list) {
  if (!list || !list.length) return h("span", { class: "muted" }, "—");
  return h("span", { class: "chips aliases" }, list.map((a) => chip(a, "alias")));
}

// Set when a graph node is activated: the next entity page focuses its graph's centre.
let focusCentre = false;

async function pageEntity(view, id, params) {
  title(view, "Entity");
  view.append(h("p", {}, h("a", { href: "#/entities" }, "← all entities")));
  const body = h("div", { id: "entity-view" });
  const report = h("div", { id: "entity-report", "aria-live": "polite" });
  view.append(report, body);
  let e;
  try {
    e = await api("GET", `/v1/entities/${enc(id)}`, { query: partition() });
  } catch (err) {
    body.append(errorBox(err));
    if (err.code === "not_found") body.append(h("p", {}, "It is not in this scope; it may have been forgotten."));
    return;
  }
  let centre = e;
  let merged = null;
  if (e.merged_into) {
    try {
      centre = await api("GET", `/v1/entities/${enc(e.merged_into)}`, { query: partition() });
      merged = centre;
    } catch {
      merged = { id: e.merged_into, name: e.merged_into };
    }
  }
  view.querySelector("h1").textContent = "Entity: " + visible(entityName(e));
  const hops = num(params, "hops", 1, 3, 1);

  body.append(section("Details", merged ? h("p", { class: "notice", id: "merged-notice" }, "Merged into ",
    h("a", { href: `#/entities/${enc(merged.id)}`, id: "merged-into" }, entityName(merged)),
    ": its name and aliases are the survivor's aliases now, its relationships moved there (the graph below is the survivor's).") : null,
  dl([
    ["Name", e.name],
    ["Shown as", e.canonical_name && e.canonical_name !== e.name ? e.canonical_name : null],
    ["Type", h("span", {}, chip(e.type, "kind type-" + e.type), e.subtype ? " " + e.subtype : "")],
    ["Aliases", aliases(e.aliases)],
    ["Merged into", merged ? h("code", {}, "ent:" + merged.id) : null],
    ["Description", e.description],
    ["Ref", h("code", {}, "ent:" + e.id)],
    ["Created", date(e.created_at)],
    ["Updated", date(e.updated_at)],
    ["Facts", h("a", { href: hashOf("#/facts", { subject: e.name }), id: "entity-facts" }, `Facts about ${visible(e.name)}`)],
  ])));

  // The neighbourhood: a hop selector, the graph, and the same nodes as a table.
  const graphBox = h("div", { class: "graph-box", id: "graph-box" }, h("p", { class: "muted" }, "Loading the graph…"));
  const table = h("div", { id: "neighbours" });
  const rels = h("div", { id: "relationships" }, h("p", { class: "muted" }, "Loading…"));
  const buttons = [1, 2, 3].map((n) => h("button", {
    type: "button", class: "secondary hop", "data-hops": n, "aria-pressed": String(n === hops),
  }, `${n} hop${n > 1 ? "s" : ""}`));
  // A narrow screen starts at the graph's actual size (scrolled to its centre): fitted, the
  // labels would be too small to read.
  const narrow = matchMedia("(max-width: 40em)").matches;
  const fit = h("button", { type: "button", class: "secondary small", id: "graph-fit", "aria-pressed": String(!narrow) }, "Fit to width");
  let current = hops;
  const draw = async (n, { focus } = {}) => {
    current = n;
    for (const b of buttons) b.setAttribute("aria-pressed", String(Number(b.dataset.hops) === n));
    put(graphBox, h("p", { class: "muted" }, "Loading the graph…"));
    try {
      const hood = await neighbourhood(centre, n);
      showGraph(graphBox, table, centre, hood, n, fit);
      if (focus) {
        const c = graphBox.querySelector(".node.centre");
        if (c) c.focus();
      }
      return hood;
    } catch (err) {
      put(graphBox, errorBox(err));
      put(table);
      return null;
    }
  };
  for (const b of buttons) {
    b.addEventListener("click", async () => {
      const n = Number(b.dataset.hops);
      history.replaceState(null, "", hashOf(`#/entities/${enc(id)}`, { hops: n }));
      await draw(n);
    });
  }
  fit.addEventListener("click", () => {
    const on = fit.getAttribute("aria-pressed") !== "true";
    fit.setAttribute("aria-pressed", String(on));
    graphBox.classList.toggle("actual", !on);
    centreScroll(graphBox);
  });
  body.append(section("Neighbourhood",
    h("p", { class: "muted" }, "Relationships in both directions, ring by ring: the centre, then the entities one hop away, two hops… Arrows point from source to target. Activate an entity (click, or Tab to it and press Enter) to centre the graph on it."),
    h("div", { class: "row graph-controls" }, h("span", { class: "label", id: "hops-label" }, "Hops:"),
      h("span", { class: "row", role: "group", "aria-labelledby": "hops-label" }, buttons), fit),
    graphBox, legend(), table));
  body.append(section("Relationships", rels));
  body.append(section("Forget", h("p", {}, "Removes the entity and its relationships."),
    confirmButton("Forget this entity", "Forget " + visible(entityName(e)), async () => {
      const r = await forgetRef("ent:" + e.id, report);
      if (r) put(body, h("p", {}, h("a", { href: "#/entities" }, "← all entities")));
    })));

  const focus = focusCentre;
  focusCentre = false;
  const hood = await draw(hops, { focus });
  const loadRels = async () => {
    await showRelationships(rels, centre, report, async () => {
      await loadRels();
      await draw(current);
    }, hood);
  };
  await loadRels();
}

/** The related entities of `centre` up to `hops`, and every relationship among them. */
async function neighbourhood(centre, hops) {
  const data = await api("GET", `/v1/entities/${enc(centre.id)}/related`, { query: { ...partition(), depth: hops } });
  const all = data.related;
  const related = all.slice(0, MAX_GRAPH);
  const ids = new Set([centre.id, ...related.map((r) => r.entity.id)]);
  const edges = new Map();
  for (const r of related) edges.set(r.via.id, r.via);
  await pool([centre.id, ...related.map((r) => r.entity.id)], 6, async (id) => {
    const list = await api("GET", `/v1/entities/${enc(id)}/relationships`, { query: { ...partition(), limit: 1000 } });
    for (const rel of list.relationships) {
      if (ids.has(rel.source_id) && ids.has(rel.target_id)) edges.set(rel.id, rel);
    }
  });
  const names = new Map([[centre.id, centre], ...all.map((r) => [r.entity.id, r.entity])]);
  return { all, related, edges: [...edges.values()], names };
}

function showGraph(box, tableBox, centre, hood, hops, fit) {
  const { svg, nodes, edges } = neighbourhoodGraph(centre, hood.related, hood.edges, {
    hrefOf: (e) => hashOf(`#/entities/${enc(e.id)}`, { hops }),
    onPick: () => {
      focusCentre = true;
    },
    label: `Neighbourhood of ${entityName(centre)} within ${hops} hop(s): ${hood.related.length + 1} entities, ${hood.edges.length} relationships`,
  });
  box.classList.toggle("actual", fit.getAttribute("aria-pressed") !== "true");
  put(box, h("p", { class: "muted graph-count", id: "graph-count" },
    `${nodes} entities, ${edges} relationships within ${hops} hop${hops > 1 ? "s" : ""}` +
    (hood.all.length > hood.related.length ? ` (the nearest ${hood.related.length} of ${hood.all.length} drawn; the table lists all)` : "")),
  h("div", { class: "graph-scroll", tabindex: -1 }, svg));
  centreScroll(box);
  if (!hood.all.length) {
    put(tableBox, h("p", { class: "muted" }, "No relationships: nothing is connected to it."));
    return;
  }
  const name = (id) => {
    const x = hood.names.get(id);
    return x ? entityName(x) : id;
  };
  put(tableBox, stackWrap(h("table", { id: "neighbours-table" },
    h("caption", {}, `${hood.all.length} related entit${hood.all.length === 1 ? "y" : "ies"}, nearest first`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Entity"), h("th", { scope: "col" }, "Type"),
      h("th", { scope: "col", class: "num" }, "Hops"), h("th", { scope: "col" }, "Reached over"))),
    h("tbody", {}, hood.all.map((r) => h("tr", { "data-entity": r.entity.id, "data-depth": r.depth },
      h("td", {}, h("a", { href: hashOf(`#/entities/${enc(r.entity.id)}`, { hops }) }, entityName(r.entity))),
      h("td", {}, chip(r.entity.type, "kind type-" + r.entity.type)),
      h("td", { class: "num" }, String(r.depth)),
      h("td", {}, edgeText(name(r.via.source_id), r.via.relationship_type, name(r.via.target_id)))))))));
}

/** Scrolls an actual-size graph so that its centre is in view. */
function centreScroll(box) {
  const scroller = box.querySelector(".graph-scroll");
  if (!scroller) return;
  scroller.scrollLeft = (scroller.scrollWidth - scroller.clientWidth) / 2;
  scroller.scrollTop = (scroller.scrollHeight - scroller.clientHeight) / 2;
}

function edgeText(from, type, to) {
  return h("span", { class: "edge-text" }, from, " ", h("code", {}, type), " → ", to);
}

function legend() {
  return h("ul", { class: "legend", "aria-label": "Entity types" },
    ENTITY_TYPES.map((t) => h("li", { class: "type-" + t }, h("span", { class: "swatch", "aria-hidden": "true" }), t)));
}

async function showRelationships(box, centre, report, reload, hood) {
  let data;
  try {
    data = await api("GET", `/v1/entities/${enc(centre.id)}/relationships`, { query: { ...partition(), limit: 1000 } });
  } catch (err) {
    put(box, errorBox(err));
    return;
  }
  if (!data.relationships.length) {
    put(box, h("p", { class: "muted" }, "None."));
    return;
  }
  const names = hood ? hood.names : new Map([[centre.id, centre]]);
  const other = (id) => {
    const x = names.get(id);
    return x ? h("a", { href: `#/entities/${enc(id)}` }, entityName(x)) : h("a", { href: `#/entities/${enc(id)}` }, h("code", {}, id));
  };
  put(box, stackWrap(h("table", { id: "relationships-table" },
    h("caption", {}, `${data.total} relationship(s) with ${visible(entityName(centre))} at either end, oldest first`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Direction"), h("th", { scope: "col" }, "Type"),
      h("th", { scope: "col" }, "Other end"), h("th", { scope: "col", class: "wide-only" }, "Properties"),
      h("th", { scope: "col", class: "wide-only" }, "Created"), h("th", { scope: "col" }, "Actions"))),
    h("tbody", {}, data.relationships.map((r) => {
      const out = r.source_id === centre.id;
      const props = r.properties && Object.keys(r.properties).length ? h("code", {}, JSON.stringify(r.properties)) : "—";
      return h("tr", { "data-rel": r.id },
        h("td", {}, out ? "outgoing →" : "← incoming"),
        h("td", {}, h("code", {}, r.relationship_type)),
        h("td", {}, other(out ? r.target_id : r.source_id)),
        h("td", { class: "wide-only" }, props),
        h("td", { class: "wide-only" }, date(r.created_at)),
        h("td", {}, confirmButton("Forget", "Forget rel:" + r.id.slice(0, 8), async () => {
          if (await forgetRef("rel:" + r.id, report)) await reload();
        })));
    })))));
}

// ---------------------------------------------------------------------------------------
// Facts

/** A predicate's canonical form, as the server compares it (`Works at` = `works_at`). */
export function canonicalPredicate(s) {
  let out = "";
  for (const c of String(s).trim()) {
    if (/[\p{Alphabetic}\p{N}]/u.test(c)) out += c.toLowerCase();
    else if (out && !out.endsWith("_")) out += "_";
  }
  return out.replace(/_+$/, "");
}

function validity(f) {
  if (f.valid_from == null && f.valid_until == null) return "always (no window)";
  if (f.valid_until == null) return `from ${date(f.valid_from)}`;
  if (f.valid_from == null) return `until ${date(f.valid_until)}`;
  return `${date(f.valid_from)} → ${date(f.valid_until)}`;
}

function cardinalityChip(predicate, cards) {
  const c = cards.get(canonicalPredicate(predicate));
  return c ? chip(c, "card card-" + c) : chip("undeclared", "card card-undeclared");
}

function factRefs(refs) {
  if (!refs || !refs.length) return h("span", { class: "muted" }, "none");
  return h("ul", { class: "refs" }, refs.map((r) => h("li", {}, refLink(r))));
}

/** Evidence: a link to the cited record's page and its content on demand. */
function evidenceList(refs) {
  if (!refs || !refs.length) return h("p", { class: "muted" }, "No evidence.");
  return h("ul", { class: "evidence" }, refs.map((r) => h("li", { class: "evidence-item", "data-ref": r },
    refLink(r), evidence(r, "Show the cited text"))));
}

async function predicates() {
  const data = await api("GET", "/v1/predicates", { query: { ...partition(), limit: 1000 } });
  return { list: data.predicates, cards: new Map(data.predicates.map((p) => [canonicalPredicate(p.name), p.cardinality])) };
}

export async function pageFacts(view, args, params) {
  if (args[0]) return pageFact(view, args[0]);
  title(view, "Facts", "Subject–predicate–object facts with their validity, confidence and evidence: what holds now, subject by subject; the history of one subject's predicate (what superseded what); open conflicts side by side with their evidence; and each predicate's declared cardinality.");
  const subject = (params.get("subject") || "").trim();
  const predicate = (params.get("predicate") || "").trim();
  const subj = h("input", { id: "fact-subject", name: "subject", value: subject, maxlength: 1024, spellcheck: "false" });
  const pred = h("input", { id: "fact-predicate", name: "predicate", value: predicate, maxlength: 256, spellcheck: "false" });
  const form = h("form", { class: "card form row", id: "fact-form", role: "search" },
    field("Subject", subj), field("Predicate (for its history)", pred), h("button", { type: "submit" }, "Show"),
    subject || predicate ? h("a", { href: "#/facts" }, "All subjects") : null);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = hashOf("#/facts", { subject: subj.value.trim(), predicate: pred.value.trim() });
  });
  const report = h("div", { id: "facts-report", "aria-live": "polite" });
  const history = h("div", { id: "fact-history" });
  const currentBox = h("div", { id: "facts-current" }, h("p", { class: "muted" }, "Loading…"));
  const conflictsBox = h("div", { id: "conflicts" }, h("p", { class: "muted" }, "Loading…"));
  const predicatesBox = h("div", { id: "predicates" });
  view.append(form, report);
  if (predicate) view.append(section(`History: ${subject || "every subject"} · ${predicate}`, history));
  view.append(section(subject ? `Current facts about ${subject}` : "Current facts", currentBox),
    section("Open conflicts", conflictsBox), section("Declared predicates", predicatesBox));
  let preds;
  try {
    preds = await predicates();
  } catch (err) {
    put(predicatesBox, errorBox(err));
    preds = { list: [], cards: new Map() };
  }
  showPredicates(predicatesBox, preds.list);
  const reload = async () => {
    if (predicate) await loadHistory(history, subject, predicate, preds.cards, report, reload);
    await loadCurrent(currentBox, subject, preds.cards, report, reload);
    await loadConflicts(conflictsBox, preds.cards, report, reload);
  };
  await reload();
}

function showPredicates(box, list) {
  put(box, list.length ? stackWrap(h("table", { id: "predicates-table" },
    h("caption", {}, "A single-valued predicate's new object supersedes the current one; multi-valued objects stand side by side; an undeclared predicate's second object is an open conflict."),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Predicate"), h("th", { scope: "col" }, "Cardinality"), h("th", { scope: "col" }, "Declared"))),
    h("tbody", {}, list.map((p) => h("tr", { "data-predicate": p.name },
      h("td", {}, h("code", {}, p.name)), h("td", {}, chip(p.cardinality, "card card-" + p.cardinality)), h("td", {}, date(p.updated_at)))))))
    : h("p", { class: "muted" }, "No declared predicates: every predicate is undeclared."));
}

async function loadCurrent(box, subject, cards, report, reload) {
  let data;
  try {
    data = await api("GET", "/v1/facts", { query: { ...partition(), subject, limit: 1000 } });
  } catch (err) {
    put(box, errorBox(err));
    return;
  }
  if (!data.facts.length) {
    put(box, h("p", { class: "muted", id: "facts-empty" }, subject ? `Nothing holds now about ${subject}.` : "No current facts in this scope."));
    return;
  }
  const groups = new Map();
  for (const f of data.facts) {
    const key = f.subject.trim().toLowerCase();
    (groups.get(key) || groups.set(key, { name: f.subject, facts: [] }).get(key)).facts.push(f);
  }
  put(box, data.total > data.facts.length ? h("p", { class: "muted" }, `The first ${data.facts.length} of ${data.total}.`) : null,
    [...groups.values()].map((g) => h("div", { class: "subject", "data-subject": g.name },
      h("h3", {}, h("a", { href: hashOf("#/facts", { subject: g.name }) }, g.name)),
      stackWrap(h("table", { class: "facts-table" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Predicate"), h("th", { scope: "col" }, "Object"),
          h("th", { scope: "col" }, "Valid"), h("th", { scope: "col", class: "num wide-only" }, "Confidence"),
          h("th", { scope: "col", class: "wide-only" }, "Evidence"), h("th", { scope: "col" }, "Actions"))),
        h("tbody", {}, g.facts.map((f) => h("tr", { "data-fact": f.id, "data-predicate": canonicalPredicate(f.predicate) },
          h("td", {}, h("code", {}, f.predicate), " ", cardinalityChip(f.predicate, cards)),
          h("td", {}, h("a", { href: `#/facts/${enc(f.id)}`, class: "object" }, f.object)),
          h("td", {}, validity(f)),
          h("td", { class: "num wide-only" }, Number(f.confidence).toFixed(2)),
          h("td", { class: "wide-only" }, factRefs(f.evidence_refs)),
          h("td", {}, h("span", { class: "row" },
            h("a", { href: hashOf("#/facts", { subject: f.subject, predicate: f.predicate }), class: "history-link" }, "History"),
            confirmButton("Forget", "Forget " + visible(f.object), async () => {
              if (await forgetRef("fact:" + f.id, report)) await reload();
            })))))))))));
}

async function loadHistory(box, subject, predicate, cards, report, reload) {
  let data;
  try {
    data = await api("GET", "/v1/facts", { query: { ...partition(), subject, predicate, history: true, limit: 1000 } });
  } catch (err) {
    put(box, errorBox(err));
    return;
  }
  const facts = data.facts.slice().sort((a, b) => (a.valid_from ?? -Infinity) - (b.valid_from ?? -Infinity) || a.created_at - b.created_at);
  if (!facts.length) {
    put(box, h("p", { class: "muted" }, "No fact, current or past, with this subject and predicate."));
    return;
  }
  const byId = new Map(facts.map((f) => [f.id, f]));
  const now = Date.now();
  const starts = facts.map((f) => f.valid_from ?? f.created_at);
  const lo = Math.min(...starts);
  const hi = Math.max(now, ...facts.map((f) => f.valid_until ?? now));
  const span = Math.max(1, hi - lo);
  const link = (id) => {
    const f = byId.get(id);
    return h("a", { href: `#/facts/${enc(id)}` }, f ? f.object : h("code", {}, "fact:" + id));
  };
  put(box, h("p", {}, "Cardinality of ", h("code", {}, predicate), ": ", cardinalityChip(predicate, cards),
    ` · ${facts.length} fact(s), oldest validity first. Bars: each fact's validity window, ${date(lo)} to ${hi === now ? "now" : date(hi)}.`),
  h("ol", { class: "history", id: "history-list" }, facts.map((f) => {
    const from = ((f.valid_from ?? lo) - lo) / span;
    const until = ((f.valid_until ?? hi) - lo) / span;
    return h("li", {}, h("article", { class: "fact-entry fact-" + f.status, "data-fact": f.id, "data-status": f.status },
      h("header", {}, h("strong", { class: "object" }, f.object), " ", chip(f.status, "status status-" + f.status),
        " ", h("span", { class: "muted" }, validity(f))),
      windowBar(from, until, f.status),
      dl([
        ["Supersedes", f.supersedes && f.supersedes.length ? h("span", {}, f.supersedes.map((id, i) => [i ? ", " : "", link(id)])) : null],
        ["Superseded by", f.superseded_by ? link(f.superseded_by) : null],
        ["Invalidated by", f.invalidated_by && f.invalidated_by.length ? factRefs(f.invalidated_by) : null],
        ["Confidence", Number(f.confidence).toFixed(2)],
        ["Evidence", factRefs(f.evidence_refs)],
        ["Recorded", date(f.created_at)],
        ["Ref", h("a", { href: `#/facts/${enc(f.id)}` }, h("code", {}, "fact:" + f.id))],
      ], "facts compact"),
      f.status !== "invalidated" ? confirmButton("Forget", "Forget " + visible(f.object), async () => {
        if (await forgetRef("fact:" + f.id, report)) await reload();
      }) : null));
  })));
}

/** A validity window as a bar across the history's span (0 to 1). */
function windowBar(from, until, status) {
  const x = Math.max(0, Math.min(1, from)) * 100;
  const w = Math.max(0.8, Math.max(0, Math.min(1, until)) * 100 - x);
  return s("svg", { class: "bar window-bar", viewBox: "0 0 100 10", preserveAspectRatio: "none", "aria-hidden": "true", focusable: "false" },
    s("rect", { class: "bar-bg", x: 0, y: 0, width: 100, height: 10 }),
    s("rect", { class: "win win-" + status, x: x.toFixed(2), y: 0, width: w.toFixed(2), height: 10 }));
}

/** A conflict's subject as written (the answer's `subject` is normalized). */
function shownSubject(c) {
  return c.facts.length ? c.facts[0].subject : c.subject;
}

async function loadConflicts(box, cards, report, reload) {
  let data;
  try {
    data = await api("GET", "/v1/facts/conflicts", { query: { ...partition(), limit: 100 } });
  } catch (err) {
    put(box, errorBox(err));
    return;
  }
  if (!data.conflicts.length) {
    put(box, h("p", { class: "muted", id: "conflicts-empty" }, "None: no two current facts disagree."));
    return;
  }
  put(box, h("p", { class: "muted" }, `${data.total} open conflict(s). Resolve one by forgetting the wrong fact, by writing the right one with supersede, or by declaring the predicate.`),
    data.conflicts.map((c) => h("div", { class: "conflict", "data-subject": c.subject, "data-predicate": c.predicate },
      h("h3", {}, h("a", { href: hashOf("#/facts", { subject: shownSubject(c), predicate: c.predicate }) }, `${shownSubject(c)} · ${c.predicate}`),
        " ", cardinalityChip(c.predicate, cards)),
      h("div", { class: "sides" }, c.facts.map((f) => h("div", { class: "side", "data-fact": f.id },
        h("p", {}, h("strong", { class: "object" }, f.object)),
        dl([["Valid", validity(f)], ["Confidence", Number(f.confidence).toFixed(2)], ["Recorded", date(f.created_at)],
          ["Ref", h("a", { href: `#/facts/${enc(f.id)}` }, h("code", {}, "fact:" + f.id))]], "facts compact"),
        h("h4", {}, "Evidence"), evidenceList(f.evidence_refs),
        h("p", {}, confirmButton("Forget this fact", "Forget " + visible(f.object), async () => {
          if (await forgetRef("fact:" + f.id, report)) await reload();
        }))))))));
}

async function pageFact(view, id) {
  title(view, "Fact");
  view.append(h("p", {}, h("a", { href: "#/facts" }, "← all facts")));
  const body = h("div", { id: "fact-view" });
  const report = h("div", { id: "fact-report", "aria-live": "polite" });
  view.append(report, body);
  let f;
  let preds;
  try {
    f = await api("GET", `/v1/facts/${enc(id)}`, { query: partition() });
    preds = await predicates();
  } catch (err) {
    body.append(errorBox(err));
    if (err.code === "not_found") body.append(h("p", {}, "It is not in this scope; it may have been forgotten."));
    return;
  }
  view.querySelector("h1").textContent = `Fact: ${visible(f.subject)} · ${visible(f.predicate)}`;
  const link = (x) => h("a", { href: `#/facts/${enc(x)}` }, h("code", {}, "fact:" + x));
  body.append(section("Statement", dl([
    ["Subject", h("a", { href: hashOf("#/facts", { subject: f.subject }) }, f.subject)],
    ["Predicate", h("span", {}, h("code", {}, f.predicate), " ", cardinalityChip(f.predicate, preds.cards))],
    ["Object", h("strong", { class: "object" }, f.object)],
    ["Status", chip(f.status, "status status-" + f.status)],
    ["Valid", validity(f)],
    ["Confidence", Number(f.confidence).toFixed(2)],
    ["Supersedes", f.supersedes && f.supersedes.length ? h("span", {}, f.supersedes.map((x, i) => [i ? ", " : "", link(x)])) : null],
    ["Superseded by", f.superseded_by ? link(f.superseded_by) : null],
    ["Invalidated by", f.invalidated_by && f.invalidated_by.length ? factRefs(f.invalidated_by) : null],
    ["Recorded", date(f.created_at)],
    ["Ref", h("code", {}, "fact:" + f.id)],
    ["History", h("a", { href: hashOf("#/facts", { subject: f.subject, predicate: f.predicate }) }, "Every fact with this subject and predicate")],
  ])), section("Evidence", evidenceList(f.evidence_refs)));
  if (f.status !== "invalidated") {
    body.append(section("Forget", h("p", {}, "Removes this fact; facts resting on it as evidence are invalidated."),
      confirmButton("Forget this fact", "Forget " + visible(f.object), async () => {
        const r = await forgetRef("fact:" + f.id, report);
        if (r) put(body, h("p", {}, h("a", { href: "#/facts" }, "← all facts")));
      })));
  }
}

// ---------------------------------------------------------------------------------------
// Preferences

export async function pagePreferences(view, args, params) {
  title(view, "Preferences", "The user's preferences, grouped by category, oldest first within each.");
  const chosen = (params.get("category") || "").trim();
  const report = h("div", { id: "preferences-report", "aria-live": "polite" });
  const box = h("div", { id: "preferences" }, h("p", { class: "muted" }, "Loading…"));
  const filter = h("div", { id: "preferences-filter" });
  view.append(filter, report, box);
  const load = async () => {
    let data;
    try {
      data = await api("GET", "/v1/preferences", { query: { ...partition(), limit: 1000 } });
    } catch (err) {
      put(box, errorBox(err));
      return;
    }
    const groups = new Map();
    for (const p of data.preferences) {
      const key = p.category.trim().toLowerCase();
      (groups.get(key) || groups.set(key, { name: p.category, items: [] }).get(key)).items.push(p);
    }
    const names = [...groups.values()].map((g) => g.name).sort((a, b) => a.localeCompare(b));
    const sel = h("select", { id: "preference-category", name: "category" }, h("option", { value: "" }, "every category"),
      names.map((n) => h("option", { value: n, selected: n.toLowerCase() === chosen.toLowerCase() }, n)));
    const form = h("form", { class: "card form row", id: "preference-form" }, field("Category", sel), h("button", { type: "submit" }, "Show"));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      location.hash = hashOf("#/preferences", { category: sel.value });
    });
    put(filter, form);
    if (!data.preferences.length) {
      put(box, h("p", { class: "muted", id: "preferences-empty" }, "No preferences in this scope."));
      return;
    }
    const shown = [...groups.entries()].filter(([k]) => !chosen || k === chosen.toLowerCase())
      .sort((a, b) => a[1].name.localeCompare(b[1].name));
    put(box, data.total > data.preferences.length ? h("p", { class: "muted" }, `The first ${data.preferences.length} of ${data.total}.`) : null,
      shown.length ? shown.map(([, g]) => h("section", { class: "card category", "data-category": g.name, "aria-label": `Category ${g.name}` },
        h("h2", {}, g.name, h("span", { class: "muted" }, ` (${g.items.length})`)),
        h("ul", { class: "items" }, g.items.map((p) => h("li", {},
          h("article", { class: "item preference", "data-pref": p.id },
            h("p", { class: "pre content" }, p.preference),
            dl([["Context", p.context], ["Recorded", date(p.created_at)], ["Ref", h("code", {}, "pref:" + p.id)]], "facts compact"),
            confirmButton("Forget", "Forget this preference", async () => {
              if (await forgetRef("pref:" + p.id, report)) await load();
            })))))))
        : h("p", { class: "muted" }, `No preferences in the category ${chosen}.`));
  };
  await load();
}
