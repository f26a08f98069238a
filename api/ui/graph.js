// Hand-written SVG for the inspector: an entity's neighbourhood as a graph (a radial layout by
// hop distance: the centre, then one ring per hop), and small bars for charts. Text goes in as
// text nodes (shown through dom.js's `visible`), links only inside the inspector, and no style
// attribute anywhere: the look is in style.css, the geometry in SVG attributes.

import { safeHref, visible } from "./dom.js";

// The SVG namespace, spelled in parts: the inspector's files hold no absolute URL (ui.rs checks).
const NS = ["http:", "", "www.w3.org", "2000", "svg"].join("/");

/** `s("circle", {r: 4}, child)`: an SVG element (the SVG twin of dom.js's `h`). */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === "style") throw new Error("no style attributes: use a class");
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "href") el.setAttribute("href", safeHref(v));
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(visible(c)));
  }
  return el;
}

/**
 * A horizontal bar (0 to 1 of its width), or stacked segments `[[fraction, class], ...]`.
 * Decorative: the numbers are written beside it.
 */
export function bar(parts, label) {
  const segs = typeof parts === "number" ? [[parts, "bar-fg"]] : parts;
  const svg = s("svg", { class: "bar", viewBox: "0 0 100 10", preserveAspectRatio: "none", "aria-hidden": "true", focusable: "false" },
    s("rect", { class: "bar-bg", x: 0, y: 0, width: 100, height: 10 }));
  let x = 0;
  for (const [f, cls] of segs) {
    const w = Math.max(0, Math.min(1, Number(f) || 0)) * 100;
    if (w > 0) svg.append(s("rect", { class: cls, x: x.toFixed(2), y: 0, width: w.toFixed(2), height: 10 }));
    x += w;
  }
  if (label) svg.append(s("title", {}, label));
  return svg;
}

/** Cut a label to `n` characters (the whole text stays in the node's title). */
function cut(text, n) {
  const t = String(text);
  return t.length > n ? t.slice(0, n - 1) + "…" : t;
}

const RING_GAP = 175; // between rings
const ARC = 124; // at least this much ring per node: room for its label
const NODE_R = 10;
const CENTRE_R = 15;
const LABEL = 17; // characters of a node label
const EDGE_LABEL = 20;

/** A name to show for an entity. */
export function entityName(e) {
  return e.canonical_name || e.name;
}

/**
 * The graph of `centre` and `related` (`GET /v1/entities/{id}/related` items: entity, depth,
 * via) with `edges` (relationships between any two of them). `hrefOf(entity)` is the link of a
 * node; `onPick(entity)` runs when one is activated (before the link is followed).
 * Answers `{svg, nodes, edges}`.
 */
export function neighbourhoodGraph(centre, related, edges, { hrefOf, onPick, label }) {
  const nodes = new Map();
  nodes.set(centre.id, { e: centre, depth: 0, parent: null, x: 0, y: 0, angle: 0 });
  for (const r of related) {
    if (nodes.has(r.entity.id)) continue;
    const parent = r.via.source_id === r.entity.id ? r.via.target_id : r.via.source_id;
    nodes.set(r.entity.id, { e: r.entity, depth: r.depth, parent, x: 0, y: 0, angle: 0 });
  }
  const rings = [];
  for (const n of nodes.values()) (rings[n.depth] ||= []).push(n);

  // Ring by ring: nodes ordered by their parent's angle (then name), spaced evenly, and the
  // ring turned so that nodes sit as near their parents as the spacing allows.
  let radius = 0;
  const radii = [0];
  for (let d = 1; d < rings.length; d++) {
    const ring = rings[d] || [];
    if (!ring.length) {
      radii.push(radius);
      continue;
    }
    radius = Math.max(radius + RING_GAP, (ring.length * ARC) / (2 * Math.PI));
    radii.push(radius);
    const parentAngle = (n) => {
      const p = nodes.get(n.parent);
      return p && p.depth < d ? p.angle : 0;
    };
    ring.sort((a, b) => (d === 1 ? 0 : parentAngle(a) - parentAngle(b)) ||
      entityName(a.e).localeCompare(entityName(b.e)));
    const step = (2 * Math.PI) / ring.length;
    let turn = -Math.PI / 2; // ring 1 starts at the top
    if (d > 1) {
      let sx = 0;
      let sy = 0;
      ring.forEach((n, i) => {
        const diff = parentAngle(n) - i * step;
        sx += Math.cos(diff);
        sy += Math.sin(diff);
      });
      turn = sx || sy ? Math.atan2(sy, sx) : 0;
    }
    ring.forEach((n, i) => {
      n.angle = turn + i * step;
      n.x = radius * Math.cos(n.angle);
      n.y = radius * Math.sin(n.angle);
    });
  }

  const padX = 90;
  const padY = 40;
  const half = radius;
  const width = Math.round(2 * (half + padX));
  const height = Math.round(2 * (half + padY) + 20);
  const ox = width / 2;
  const oy = height / 2 - 6;

  const shown = edges.filter((r) => nodes.has(r.source_id) && nodes.has(r.target_id) && r.source_id !== r.target_id);
  // Edges between the same two nodes fan out so that each label stays readable.
  const pairs = new Map();
  for (const r of shown) {
    const key = [r.source_id, r.target_id].sort().join(" ");
    (pairs.get(key) || pairs.set(key, []).get(key)).push(r);
  }

  const edgeLayer = s("g", { class: "edges", "aria-hidden": "true" });
  const labelLayer = s("g", { class: "edge-labels", "aria-hidden": "true" });
  const nodeLayer = s("g", { class: "nodes" });
  const incident = new Map();
  const note = (id, el) => (incident.get(id) || incident.set(id, []).get(id)).push(el);

  for (const group of pairs.values()) {
    group.forEach((r, i) => {
      const a = nodes.get(r.source_id);
      const b = nodes.get(r.target_id);
      const x1 = ox + a.x;
      const y1 = oy + a.y;
      const x2 = ox + b.x;
      const y2 = oy + b.y;
      const dx = x2 - x1;
      const dy = y2 - y1;
      const len = Math.hypot(dx, dy) || 1;
      // Perpendicular, pointing away from the centre: same-ring chords bow outwards.
      let px = -dy / len;
      let py = dx / len;
      const mx = (x1 + x2) / 2;
      const my = (y1 + y2) / 2;
      if ((mx - ox) * px + (my - oy) * py < 0) {
        px = -px;
        py = -py;
      }
      // A canonical side for the pair, so that A→B and B→A bow apart.
      const sign = r.source_id < r.target_id ? 1 : -1;
      let bend = a.depth === b.depth && a.depth > 0 ? len * 0.22 : 0;
      if (group.length > 1) bend += (i - (group.length - 1) / 2) * 34 * sign;
      const cx = mx + px * bend;
      const cy = my + py * bend;
      const ra = a.depth === 0 ? CENTRE_R : NODE_R;
      const rb = b.depth === 0 ? CENTRE_R : NODE_R;
      const ua = unit(cx - x1, cy - y1);
      const ub = unit(x2 - cx, y2 - cy);
      const sx = x1 + ua[0] * (ra + 1);
      const sy = y1 + ua[1] * (ra + 1);
      const ex = x2 - ub[0] * (rb + 2);
      const ey = y2 - ub[1] * (rb + 2);
      const tip = [ex, ey];
      const back = [ex - ub[0] * 9, ey - ub[1] * 9];
      const wing = [-ub[1] * 4.5, ub[0] * 4.5];
      const type = r.relationship_type;
      const from = entityName(a.e);
      const to = entityName(b.e);
      const edge = s("g", { class: "edge", "data-rel": r.id, "data-type": type, "data-source": r.source_id, "data-target": r.target_id },
        s("title", {}, `${from} —${type}→ ${to}`),
        s("path", { d: `M${f(sx)} ${f(sy)} Q${f(cx)} ${f(cy)} ${f(back[0])} ${f(back[1])}` }),
        s("polygon", { class: "arrow", points: [tip, [back[0] + wing[0], back[1] + wing[1]], [back[0] - wing[0], back[1] - wing[1]]].map((p) => p.map(f).join(",")).join(" ") }));
      // The label at the curve's midpoint (t = 0.5 of the quadratic).
      const lx = 0.25 * sx + 0.5 * cx + 0.25 * ex;
      const ly = 0.25 * sy + 0.5 * cy + 0.25 * ey;
      const text = s("text", { class: "edge-label", x: f(lx), y: f(ly), dy: "0.35em", "text-anchor": "middle", "data-rel": r.id }, cut(type, EDGE_LABEL));
      edgeLayer.append(edge);
      labelLayer.append(text);
      note(r.source_id, edge);
      note(r.target_id, edge);
      note(r.source_id, text);
      note(r.target_id, text);
    });
  }

  // Nodes: nearest ring first in the tab order, clockwise within a ring.
  const ordered = [...nodes.values()].sort((p, q) => p.depth - q.depth || norm(p.angle) - norm(q.angle));
  for (const n of ordered) {
    const name = entityName(n.e);
    const r = n.depth === 0 ? CENTRE_R : NODE_R;
    const x = ox + n.x;
    const y = oy + n.y;
    const hopText = n.depth === 0 ? "centre" : `${n.depth} hop${n.depth > 1 ? "s" : ""}`;
    const parts = [
      s("title", {}, `${name} (${n.e.type}), ${hopText}`),
      s("circle", { class: "halo", cx: f(x), cy: f(y), r: r + 5 }),
      s("circle", { class: "dot", cx: f(x), cy: f(y), r }),
      s("text", { class: "node-label", x: f(x), y: f(y + r + 13), "text-anchor": "middle" }, cut(name, n.depth === 0 ? LABEL + 8 : LABEL)),
    ];
    const common = {
      class: `node type-${n.e.type} depth-${Math.min(n.depth, 3)}` + (n.depth === 0 ? " centre" : ""),
      "data-id": n.e.id, "data-depth": n.depth, "data-name": name,
    };
    let el;
    if (n.depth === 0) {
      el = s("g", { ...common, tabindex: -1, role: "img", "aria-label": `${name} (${n.e.type}): the centre` }, parts);
    } else {
      el = s("a", {
        ...common, href: hrefOf(n.e),
        "aria-label": `${name} (${n.e.type}), ${hopText} away: centre the graph on it`,
      }, parts);
      el.addEventListener("click", () => onPick && onPick(n.e));
    }
    const hot = (on) => {
      for (const x of incident.get(n.e.id) || []) x.classList.toggle("hot", on);
      el.classList.toggle("hot", on);
    };
    el.addEventListener("mouseenter", () => hot(true));
    el.addEventListener("mouseleave", () => hot(false));
    el.addEventListener("focus", () => hot(true));
    el.addEventListener("blur", () => hot(false));
    nodeLayer.append(el);
  }

  const svg = s("svg", {
    class: "graph", viewBox: `0 0 ${width} ${height}`, width, height,
    role: "group", "aria-label": label || `Graph: ${nodes.size} entities, ${shown.length} relationships`,
    "data-nodes": nodes.size, "data-edges": shown.length,
  }, s("g", { class: "rings", "aria-hidden": "true" },
    radii.slice(1).map((rr) => s("circle", { class: "ring", cx: f(ox), cy: f(oy), r: f(rr) }))),
  edgeLayer, labelLayer, nodeLayer);
  return { svg, nodes: nodes.size, edges: shown.length };
}

function unit(x, y) {
  const l = Math.hypot(x, y) || 1;
  return [x / l, y / l];
}

function norm(a) {
  const t = (a + Math.PI / 2) % (2 * Math.PI);
  return t < 0 ? t + 2 * Math.PI : t;
}

function f(v) {
  return Number(v).toFixed(1);
}
