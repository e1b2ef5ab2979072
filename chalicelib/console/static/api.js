// The public API, from the console's own origin and stage: /<stage>/console/ -> /<stage>/api/v1.

const KEY = "weknora.key";
const OPERATOR_KEY = "weknora.operatorKey";

// one leading slash: a path like //host/console/ would make every call protocol-relative, to that host
export const prefix = location.pathname.replace(/\/console(\/.*)?$/, "").replace(/^\/+/, "/");
export const API = `${prefix}/api/v1`;

export const keys = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => (value ? sessionStorage.setItem(KEY, value) : sessionStorage.removeItem(KEY)),
  operator: () => sessionStorage.getItem(OPERATOR_KEY),
  setOperator: (value) => (value ? sessionStorage.setItem(OPERATOR_KEY, value) : sessionStorage.removeItem(OPERATOR_KEY)),
  clear: () => { sessionStorage.removeItem(KEY); sessionStorage.removeItem(OPERATOR_KEY); },
};

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** The request's key: `key` when given (a link's key, looked up before it is used), else the stored one. */
function headers(operator, extra = {}, key = null) {
  const out = { ...extra };
  if (operator) out["X-Operator-Key"] = key ?? (keys.operator() || "");
  else out["X-API-Key"] = key ?? (keys.get() || "");
  return out;
}

async function unwrap(response, whole = false) {
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch { body = null; }
  if (!response.ok || (body && body.success === false)) {
    const error = (body && body.error) || {};
    throw new ApiError(response.status, error.code || body?.code, error.message || body?.message || text, error.details);
  }
  return body && "data" in body && !whole ? body.data : body;
}

/** `whole`: the answer's envelope, not only its `data` (a paged list's `next_cursor` is beside `data`). */
export async function call(method, path, { body, query, operator = false, key = null, whole = false } = {}) {
  let url = `${API}${path}`;
  if (query) {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== "") params.set(k, v);
    if ([...params].length) url += `?${params}`;
  }
  const init = { method, headers: headers(operator, {}, key), credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  for (let sent = 1; ; sent++) {
    const response = await fetch(url, init);
    const wait = sent < RATE_LIMIT_SENDS ? await rateLimitedWait(response) : null;
    if (wait === null) return unwrap(response, whole);
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/** Times a request is sent while the tenant's rate limit refuses it (refused before any work: safe to send again). */
const RATE_LIMIT_SENDS = 6;

/** Milliseconds to wait before sending again a request the tenant's rate limit refused (429
 * `tenant_rate_limited`: the API's, or AWS WAF's per key; its `Retry-After`, at most 60 s); null otherwise. */
async function rateLimitedWait(response) {
  if (response.status !== 429) return null;
  const body = await response.clone().json().catch(() => null);
  if (body?.error?.code !== "tenant_rate_limited") return null;
  const seconds = Number(response.headers.get("Retry-After") || "1");
  return Math.min(Math.max(Number.isFinite(seconds) ? seconds : 1, 0.1), 60) * 1000;
}

/** Every item of a list answered a page at a time (`data`, with `next_cursor` beside it: GET /knowledge-bases,
 * an operator's GET /admin/tenants/{id}/api-keys). */
export async function getAll(path, { key = null, operator = false } = {}) {
  const items = [];
  let cursor = null;
  do {
    const page = await call("GET", path, { query: cursor ? { cursor } : undefined, key, operator, whole: true });
    items.push(...(Array.isArray(page?.data) ? page.data : []));
    cursor = page?.next_cursor;
  } while (cursor);
  return items;
}

export const get = (path, query, operator = false) => call("GET", path, { query, operator });
export const post = (path, body, operator = false) => call("POST", path, { body: body ?? {}, operator });
export const put = (path, body) => call("PUT", path, { body });
export const del = (path, operator = false) => call("DELETE", path, { operator });

function xhr(method, url, { body, headers: extra = {}, onProgress }) {
  return new Promise((resolve, reject) => {
    const request = new XMLHttpRequest();
    request.open(method, url);
    for (const [k, v] of Object.entries(extra)) request.setRequestHeader(k, v);
    request.upload.onprogress = (e) => e.lengthComputable && onProgress && onProgress(e.loaded / e.total);
    request.onload = () => resolve(request);
    request.onerror = () => reject(new ApiError(0, "network_error", `${method} failed: network error`));
    request.send(body);
  });
}

/** One file into a knowledge base: multipart through the API when it fits the payload limit, else the
 * presigned PUT (the object's arrival creates the knowledge). Resolves to {knowledge_id, presigned}. */
export async function uploadFile(kbId, file, name, onProgress, limit = 4_000_000) {
  if (file.size <= limit) {
    const form = new FormData();
    form.append("file", file, name);
    form.append("fileName", name);
    const request = await xhr("POST", `${API}/knowledge-bases/${encodeURIComponent(kbId)}/knowledge/file`, {
      body: form, headers: headers(false), onProgress,
    });
    const data = await unwrap(new Response(request.responseText, { status: request.status }));
    return { knowledge_id: data.id, presigned: false };
  }
  const target = await post(`/knowledge-bases/${encodeURIComponent(kbId)}/knowledge/upload-url`, { file_name: name, file_size: file.size });
  const request = await xhr(target.method || "PUT", target.upload_url, { body: file, headers: target.headers || {}, onProgress });
  if (request.status >= 300) throw new ApiError(request.status, "upload_failed", `storage answered ${request.status}`);
  return { knowledge_id: target.knowledge_id, presigned: true };
}

/** One metadata value as the CLI reads it: a JSON number, boolean or "quoted string", else the text. */
function metaValue(text) {
  try {
    const value = JSON.parse(text);
    if (["string", "number", "boolean"].includes(typeof value)) return value;
  } catch { /* not JSON: the text itself */ }
  return text;
}

/** "dept=ops; year=2024,2025" → {dept: "ops", year: {in: [2024, 2025]}}; throws on a part without "=". */
export function metadataFilter(text) {
  const filter = {};
  for (const part of text.split(";").map((p) => p.trim()).filter(Boolean)) {
    const at = part.indexOf("=");
    if (at < 1 || at === part.length - 1) throw new Error(`metadata: expected key=value or key=v1,v2, got "${part}"`);
    const key = part.slice(0, at).trim();
    const raw = part.slice(at + 1).trim();
    const values = raw.startsWith('"') && raw.endsWith('"') ? [metaValue(raw)] : raw.split(",").map((v) => metaValue(v.trim()));
    filter[key] = values.length === 1 ? values[0] : { in: values };
  }
  return filter;
}
