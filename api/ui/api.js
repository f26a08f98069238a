// The HTTP API as the inspector uses it: scope, API key (this tab's session storage only),
// JSON requests with Cairn's error shape, multipart upload with progress, and refs.

const KEY = "cairn.inspector.key";
const SCOPE = "cairn.inspector.scope";
export const SCOPE_FIELDS = ["tenant", "user", "namespace", "agent", "session"];
export const NAME = /^[A-Za-z0-9_.-]{1,128}$/;

export function getKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function setKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

/** The scope of this tab: tenant, user, namespace (the storage boundary), agent, session. */
export function getScope() {
  let saved = {};
  try {
    saved = JSON.parse(sessionStorage.getItem(SCOPE) || "{}") || {};
  } catch {
    saved = {};
  }
  const scope = {};
  for (const f of SCOPE_FIELDS) scope[f] = NAME.test(saved[f] || "") ? saved[f] : "default";
  return scope;
}

export function setScope(scope) {
  sessionStorage.setItem(SCOPE, JSON.stringify(scope));
}

/** `{tenant, user, namespace}`: the query string of reads and deletes. */
export function partition() {
  const s = getScope();
  return { tenant: s.tenant, user: s.user, namespace: s.namespace };
}

export class ApiError extends Error {
  constructor(status, code, message, hint) {
    super(message);
    this.status = status;
    this.code = code;
    this.hint = hint || null;
  }
  toString() {
    return `${this.code}${this.status ? " (" + this.status + ")" : ""}: ${this.message}` +
      (this.hint ? ` — ${this.hint}` : "");
  }
}

function headers(extra) {
  const out = { Accept: "application/json", ...extra };
  const key = getKey();
  if (key) out.Authorization = "Bearer " + key;
  return out;
}

function toError(status, statusText, data) {
  const e = (data && typeof data === "object" && data.error) || {};
  return new ApiError(status, e.code || "http_" + status, e.message || statusText || "request failed", e.hint);
}

/** One request. `query` becomes the query string; `body` is sent as JSON. */
export async function api(method, path, { query, body, text } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v != null && v !== "") url.searchParams.set(k, String(v));
  }
  const init = { method, headers: headers(), credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(url, init);
  } catch (err) {
    throw new ApiError(0, "network", "the server did not answer (" + err.message + ")");
  }
  const raw = await res.text();
  if (text && res.ok) return raw;
  let data = null;
  try {
    data = raw ? JSON.parse(raw) : null;
  } catch {
    data = null;
  }
  if (!res.ok) throw toError(res.status, res.statusText, data);
  return data;
}

/** Multipart `POST /v1/documents/upload` of one file, reporting progress (0 to 1). */
export function upload(file, onProgress) {
  return new Promise((resolve, reject) => {
    const form = new FormData();
    const s = getScope();
    for (const f of SCOPE_FIELDS) form.append(f, s[f]);
    form.append("file", file, file.name);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/documents/upload");
    for (const [k, v] of Object.entries(headers())) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    };
    xhr.onload = () => {
      let data = null;
      try {
        data = JSON.parse(xhr.responseText);
      } catch {
        data = null;
      }
      if (xhr.status === 200 && data) resolve(data);
      else reject(toError(xhr.status, xhr.statusText, data));
    };
    xhr.onerror = () => reject(new ApiError(0, "network", "the upload did not reach the server"));
    xhr.send(form);
  });
}

/**
 * Parses a ref (`doc:<id>[#<n>]`, `msg:<conversation>/<seq>`, `mem:`, `cand:`, `evt:`, `conv:`,
 * `turn:`, and the knowledge and reasoning records `ent:`, `rel:`, `fact:`, `pref:`, `trace:`).
 */
export function parseRef(ref) {
  const s = String(ref);
  const i = s.indexOf(":");
  if (i < 1) return null;
  const kind = s.slice(0, i);
  const rest = s.slice(i + 1);
  if (!rest) return null;
  if (kind === "doc") {
    const [id, chunk] = rest.split("#");
    return { kind, id, chunk: chunk === undefined ? null : chunk };
  }
  if (kind === "msg") {
    const j = rest.lastIndexOf("/");
    if (j < 1) return null;
    return { kind, conversation: rest.slice(0, j), seq: rest.slice(j + 1) };
  }
  if (["mem", "cand", "evt", "conv", "turn", "ent", "rel", "fact", "pref", "trace"].includes(kind)) return { kind, id: rest };
  return null;
}

/** The inspector page of a ref's source, or null when it has none. */
export function refHref(ref) {
  const r = parseRef(ref);
  if (!r) return null;
  const e = encodeURIComponent;
  switch (r.kind) {
    case "doc":
      return `#/documents/${e(r.id)}` + (r.chunk != null ? `?chunk=${e(r.chunk)}` : "");
    case "msg":
      return `#/conversations/${e(r.conversation)}?seq=${e(r.seq)}`;
    case "conv":
      return `#/conversations/${e(r.id)}`;
    case "mem":
    case "cand":
      return `#/review/${e(r.id)}`;
    case "evt":
      return `#/events/${e(r.id)}`;
    case "ent":
      return `#/entities/${e(r.id)}`;
    case "fact":
      return `#/facts/${e(r.id)}`;
    case "trace":
      return `#/traces/${e(r.id)}`;
    case "pref":
      return "#/preferences";
    default:
      return null;
  }
}
