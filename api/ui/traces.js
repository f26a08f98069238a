// Traces: what agents did, one trace per task. The list by session; a trace's steps and tool
// calls in order with their statuses and durations; past traces similar to a task; and
// per-tool statistics as a small chart. A trace can be forgotten (`POST /v1/forget`,
// `trace:<id>`: with its steps and tool calls) after a confirmation.

import { h, put, field, date, dl, chip, visible } from "./dom.js";
import { api, partition } from "./api.js";
import { errorBox, title, section, stackWrap, confirmButton, pager, forgetRef } from "./parts.js";
import { bar } from "./graph.js";
import { hashOf } from "./knowledge.js";

const PAGE = 100;
const enc = encodeURIComponent;
const FAILED = new Set(["failure", "error", "timeout"]);

function duration(ms) {
  if (ms == null) return "—";
  const n = Number(ms);
  if (n < 1000) return `${Math.round(n)} ms`;
  if (n < 60_000) return `${+(n / 1000).toFixed(2)} s`;
  return `${Math.floor(n / 60_000)} min ${Math.round((n % 60_000) / 1000)} s`;
}

/** Succeeded, failed, completed (no verdict) or running. */
function resultChip(t) {
  if (t.completed_at == null) return chip("running", "status status-pending");
  if (t.success === true) return chip("succeeded", "status status-success");
  if (t.success === false) return chip("failed", "status status-failure");
  return chip("completed", "status");
}

function toolStatus(status) {
  return chip(status, "status status-" + status);
}

export async function pageTraces(view, args, params) {
  if (args[0]) return pageTrace(view, args[0]);
  title(view, "Traces", "Reasoning traces: one per task an agent worked on, grouped by session, most recently started first. Open one for its steps and tool calls in order. Below: statistics per tool over every recorded call, and past traces similar to a task.");
  const session = (params.get("session") || "").trim();
  const offset = Math.max(0, Number(params.get("offset")) || 0);
  const report = h("div", { id: "traces-report", "aria-live": "polite" });
  const filter = h("div", { id: "traces-filter" });
  const list = h("div", { id: "traces-list" }, h("p", { class: "muted" }, "Loading…"));
  const stats = h("div", { id: "tool-stats" }, h("p", { class: "muted" }, "Loading…"));
  const similar = similarForm(params.get("task") || "");
  view.append(filter, report, section(session ? `Traces of session ${session}` : "Traces by session", list),
    section("Tool statistics", stats), section("Similar traces", similar.box));
  const load = async () => {
    await loadTraces(filter, list, report, session, offset, load);
    await loadToolStats(stats);
  };
  await load();
  if (similar.task.value) await similar.run();
}

async function loadTraces(filter, list, report, session, offset, reload) {
  let all;
  let data;
  try {
    all = await api("GET", "/v1/traces", { query: { ...partition(), limit: 1000 } });
    data = session
      ? await api("GET", "/v1/traces", { query: { ...partition(), session, limit: PAGE, offset } })
      : { traces: all.traces.slice(offset, offset + PAGE), total: all.total };
  } catch (err) {
    put(list, errorBox(err));
    return;
  }
  const sessions = [...new Set(all.traces.map((t) => t.session_id))].sort();
  if (session && !sessions.includes(session)) sessions.push(session);
  const sel = h("select", { id: "trace-session", name: "session" }, h("option", { value: "" }, "every session"),
    sessions.map((x) => h("option", { value: x, selected: x === session }, x)));
  const form = h("form", { class: "card form row", id: "trace-form" }, field("Session", sel), h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = hashOf("#/traces", { session: sel.value });
  });
  put(filter, form);
  if (!data.traces.length) {
    put(list, h("p", { class: "muted", id: "traces-empty" }, session ? `No traces in session ${session}.` : "No traces in this scope."));
    return;
  }
  const groups = new Map();
  for (const t of data.traces) (groups.get(t.session_id) || groups.set(t.session_id, []).get(t.session_id)).push(t);
  put(list, h("p", { class: "muted" }, `${data.total} trace(s)` + (session ? "" : ` in ${sessions.length} session(s)`) + "."),
    [...groups.entries()].map(([sid, traces]) => h("div", { class: "session", "data-session": sid },
      h("h3", {}, "Session ", h("a", { href: hashOf("#/traces", { session: sid }) }, sid), h("span", { class: "muted" }, ` (${traces.length})`)),
      stackWrap(h("table", { class: "traces-table" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Task"), h("th", { scope: "col" }, "Result"),
          h("th", { scope: "col", class: "wide-only" }, "Started"), h("th", { scope: "col", class: "num wide-only" }, "Took"),
          h("th", { scope: "col" }, "Actions"))),
        h("tbody", {}, traces.map((t) => h("tr", { "data-trace": t.id },
          h("td", {}, h("a", { href: `#/traces/${enc(t.id)}` }, t.task),
            t.outcome ? h("small", { class: "muted outcome" }, " — " + t.outcome) : null),
          h("td", {}, resultChip(t)),
          h("td", { class: "wide-only" }, date(t.started_at)),
          h("td", { class: "num wide-only" }, t.completed_at != null ? duration(t.completed_at - t.started_at) : "—"),
          h("td", {}, confirmButton("Forget", "Forget this trace", async () => {
            if (await forgetRef("trace:" + t.id, report)) await reload();
          }))))))))),
    pager(hashOf("#/traces", { session }), offset, PAGE, data.total));
}

/** Per tool: calls (succeeded, failed, other), success rate and mean duration, as bars. */
async function loadToolStats(box) {
  let data;
  try {
    data = await api("GET", "/v1/tools/stats", { query: partition() });
  } catch (err) {
    put(box, errorBox(err));
    return;
  }
  const tools = data.tools;
  if (!tools.length) {
    put(box, h("p", { class: "muted" }, "No tool calls recorded."));
    return;
  }
  const maxCalls = Math.max(1, ...tools.map((t) => t.total_calls));
  const maxMean = Math.max(1, ...tools.map((t) => t.avg_duration_ms || 0));
  const rows = tools.map((t) => {
    const calls = `${t.total_calls} call${t.total_calls === 1 ? "" : "s"}: ${t.successful_calls} succeeded, ${t.failed_calls} failed` +
      (t.other_calls ? `, ${t.other_calls} other` : "");
    const finished = t.successful_calls + t.failed_calls;
    const rate = finished ? `${Math.round(t.success_rate * 100)} %` : "no finished call";
    const mean = t.avg_duration_ms != null ? duration(t.avg_duration_ms) + (t.p95_duration_ms != null ? ` (p95 ${duration(t.p95_duration_ms)})` : "") : "no durations";
    return h("li", { class: "tool", "data-tool": t.name },
      h("h3", { class: "small" }, h("code", {}, t.name)),
      h("dl", { class: "chart" },
        h("dt", {}, "Calls"), h("dd", {}, bar([[t.successful_calls / maxCalls, "seg-ok"], [t.failed_calls / maxCalls, "seg-fail"], [t.other_calls / maxCalls, "seg-other"]]),
          h("span", { class: "value", "data-metric": "calls" }, calls)),
        h("dt", {}, "Success rate"), h("dd", {}, bar(finished ? t.success_rate : 0), h("span", { class: "value", "data-metric": "success" }, rate)),
        h("dt", {}, "Mean duration"), h("dd", {}, bar((t.avg_duration_ms || 0) / maxMean), h("span", { class: "value", "data-metric": "mean" }, mean))));
  });
  put(box, h("p", { class: "muted" }, `${tools.length} tool(s), by name. Calls: succeeded, failed (failure, error, timeout) and other (pending, cancelled), against the busiest tool; durations against the slowest.`),
    h("ul", { class: "tool-chart", id: "tool-chart", "aria-label": "Calls, success rate and mean duration per tool" }, rows),
    h("details", {}, h("summary", {}, "As a table"), stackWrap(h("table", { id: "tool-stats-table" },
      h("thead", {}, h("tr", {}, ["Tool", "Calls", "Succeeded", "Failed", "Other", "Success rate", "Mean", "p95"].map((x, i) =>
        h("th", { scope: "col", class: i ? "num" : null }, x)))),
      h("tbody", {}, tools.map((t) => h("tr", { "data-tool": t.name },
        h("td", {}, h("code", {}, t.name)), h("td", { class: "num" }, String(t.total_calls)),
        h("td", { class: "num" }, String(t.successful_calls)), h("td", { class: "num" }, String(t.failed_calls)),
        h("td", { class: "num" }, String(t.other_calls)), h("td", { class: "num" }, `${(t.success_rate * 100).toFixed(1)} %`),
        h("td", { class: "num" }, duration(t.avg_duration_ms)), h("td", { class: "num" }, duration(t.p95_duration_ms)))))))));
}

/** A form asking for past traces similar to a task, and its answer. */
function similarForm(initial, exclude) {
  const task = h("input", { type: "search", id: "similar-task", name: "task", required: true, maxlength: 8192, value: initial });
  const only = h("input", { type: "checkbox", id: "similar-success", name: "success_only" });
  const results = h("div", { id: "similar-results", "aria-live": "polite" });
  const submit = h("button", { type: "submit" }, "Find similar");
  const run = async () => {
    submit.disabled = true;
    put(results, h("p", { class: "muted" }, "Searching…"));
    try {
      const data = await api("GET", "/v1/traces/similar", { query: { ...partition(), task: task.value.trim(), success_only: only.checked || null, limit: 10 } });
      const hits = data.results.filter((r) => r.item.id !== exclude);
      put(results, hits.length ? h("ol", { class: "similar", id: "similar-list" }, hits.map((r) => h("li", { "data-trace": r.item.id },
        h("a", { href: `#/traces/${enc(r.item.id)}` }, r.item.task), " ", resultChip(r.item),
        h("small", { class: "muted" }, ` session ${visible(r.item.session_id)} · score ${r.score.toFixed(4)}` + (r.item.outcome ? ` · ${visible(r.item.outcome)}` : "")))))
        : h("p", { class: "muted", id: "similar-empty" }, "No similar traces."));
    } catch (err) {
      put(results, errorBox(err));
    } finally {
      submit.disabled = false;
    }
  };
  const form = h("form", { class: "form", id: "similar-form", role: "search" },
    field("Task", task), h("label", { class: "inline" }, only, " only traces that succeeded"), h("div", { class: "row" }, submit));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    run();
  });
  return { box: h("div", {}, form, results), task, run };
}

async function pageTrace(view, id) {
  title(view, "Trace");
  view.append(h("p", {}, h("a", { href: "#/traces" }, "← all traces")));
  const body = h("div", { id: "trace-view" });
  const report = h("div", { id: "trace-report", "aria-live": "polite" });
  view.append(report, body);
  let t;
  try {
    t = await api("GET", `/v1/traces/${enc(id)}`, { query: partition() });
  } catch (err) {
    body.append(errorBox(err));
    if (err.code === "not_found") body.append(h("p", {}, "It is not in this scope; it may have been forgotten."));
    return;
  }
  view.querySelector("h1").textContent = "Trace: " + visible(t.task);
  const calls = t.steps.flatMap((st) => st.tool_calls);
  const failed = calls.filter((c) => FAILED.has(c.status)).length;
  body.append(section("Task", dl([
    ["Task", t.task],
    ["Result", resultChip(t)],
    ["Outcome", t.outcome],
    ["Session", h("a", { href: hashOf("#/traces", { session: t.session_id }) }, t.session_id)],
    ["Started", date(t.started_at)],
    ["Completed", t.completed_at != null ? date(t.completed_at) : "not yet"],
    ["Took", t.completed_at != null ? duration(t.completed_at - t.started_at) : null],
    ["Steps", String(t.steps.length)],
    ["Tool calls", `${calls.length}` + (failed ? ` (${failed} failed)` : "")],
    ["Ref", h("code", {}, "trace:" + t.id)],
  ])));
  const steps = h("ol", { class: "steps", id: "steps" }, t.steps.map((st) => h("li", {},
    h("article", { class: "step", id: "step-" + st.step_number, "data-step": st.step_number },
      h("h3", {}, `Step ${st.step_number}`, h("small", { class: "muted" }, " · " + date(st.created_at))),
      dl([["Thought", st.thought ? h("span", { class: "pre" }, st.thought) : null],
        ["Action", st.action ? h("span", { class: "pre" }, st.action) : null],
        ["Observation", st.observation ? h("span", { class: "pre" }, st.observation) : null]], "facts compact"),
      st.tool_calls.length ? h("ol", { class: "tool-calls" }, st.tool_calls.map((c) => h("li", {}, toolCall(c))))
        : h("p", { class: "muted" }, "No tool calls.")))));
  if (!t.steps.length) steps.append(h("li", { class: "muted" }, "No steps recorded."));
  body.append(section("Steps and tool calls", steps));
  const similar = similarForm(t.task, t.id);
  body.append(section("Similar traces", h("p", { class: "muted" }, "Past traces whose task means something like this one (this trace left out)."), similar.box));
  body.append(section("Forget", h("p", {}, "Removes the trace with its steps and tool calls."),
    confirmButton("Forget this trace", "Forget trace " + visible(t.task), async () => {
      const r = await forgetRef("trace:" + t.id, report);
      if (r) put(body, h("p", {}, h("a", { href: "#/traces" }, "← all traces")));
    })));
  await similar.run();
}

function toolCall(c) {
  const json = (v) => h("pre", { class: "json" }, JSON.stringify(v, null, 2));
  const bad = FAILED.has(c.status);
  return h("div", { class: "tool-call" + (bad ? " failed" : ""), "data-tool": c.tool_name, "data-status": c.status, "data-call": c.call_number },
    h("header", {}, h("span", { class: "muted" }, `#${c.call_number} `), h("code", { class: "tool-name" }, c.tool_name), " ",
      toolStatus(c.status), " ", h("span", { class: "duration" }, duration(c.duration_ms))),
    c.error ? h("p", { class: "pre tool-error" }, "Error: ", c.error) : null,
    h("details", {}, h("summary", {}, "Arguments"), json(c.arguments)),
    c.result !== undefined && c.result !== null ? h("details", {}, h("summary", {}, "Result"), json(c.result)) : null);
}
