// The console: a page per fragment state (#kb=ID, #knowledge=ID, #view=...), on the public API only.
import { API, ApiError, call, del, get, getAll, keys, metadataFilter, post, uploadFile } from "./api.js";
import { append, badge, bytes, dollars, h, highlighted, replace, seconds, table, toast, when } from "./dom.js";

const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");
const IN_FLIGHT = new Set(["pending", "processing", "finalizing", "deleting"]);
const FAQ_PAGE = 50; // entries a request (the API's default is 20)
const LIST_PAGE = 50; // a knowledge base's documents a "More" adds
const LIST_MAX_PAGE = 100; // the largest page the list takes
const DLQ_LIST = 100; // dead letters listed on the operators' page
// one queue's letters counted, at most: a listing reads each letter's row and gives it back (about 3 calls a
// letter), so 300 stay well inside API Gateway's 29 s (the API takes up to 1,000); past it the count shows "300+"
const DLQ_QUEUE_LIST = 300;
const STATES = ["draft", "pending", "processing", "finalizing", "completed", "failed", "cancelled", "deleting"];
let timer = null;
let generation = 0;

const enc = encodeURIComponent;
const fragment = () => new URLSearchParams(location.hash.slice(1));
const link = (params, text) => h("a", { href: `#${new URLSearchParams(params)}` }, text);

const LINK_KEYS = [["key", keys.get, keys.set, "API key"], ["operator_key", keys.operator, keys.setOperator, "operator key"]];
/** Keys a link brought to a tab that held none, kept here (never stored) until the person says to use them. */
let offered = null;

/** The end of a key: enough to tell two keys apart, never enough to use one. */
const keyEnd = (key) => `…${key.slice(-4)}`;

/** Take the keys out of the fragment and out of the address bar (and history). None is used because a link
 * carried it: anyone can send a link, and a fresh tab signed in by it would work in the sender's tenant (what
 * is uploaded there goes to them). A tab holding no key asks first (confirmLinkKeys); a signed-in tab keeps
 * its key (sign out first to change keys). */
function takeKeysFromFragment() {
  const params = fragment();
  let changed = false;
  for (const [name, stored, , what] of LINK_KEYS) {
    if (!params.has(name)) continue;
    const key = params.get(name);
    if (key && !stored()) offered = { ...offered, [name]: key };
    else if (key && stored() !== key) toast(`The link's ${what} was ignored: you are signed in already (sign out to use another).`, true);
    params.delete(name);
    changed = true;
  }
  if (changed) {
    const rest = params.toString();
    history.replaceState(null, "", `${location.pathname}${location.search}${rest ? `#${rest}` : ""}`);
  }
}

/** Whether another page was routed to since `mine` (a view's `generation` when it began): a view that waited
 * for the API stops there, else its late answer would replace the newer page. */
const stale = (mine) => mine !== generation;

function poll(fn, ms = 2500) {
  clearTimeout(timer);
  const mine = generation;
  timer = setTimeout(() => { if (mine === generation) fn(); }, ms);
}

function failed(error) {
  if (error instanceof ApiError && (error.status === 401 || error.code === "invalid_api_key" || error.code === "missing_api_key")) {
    keys.set(null);
    route();
    return;
  }
  toast(error.message || String(error), true);
}

function crumb(...items) { replace(crumbs, items); }

// ------------------------------------------------------------------ sign in

function signIn() {
  crumb();
  const key = h("input", { type: "password", id: "api-key", autocomplete: "off", placeholder: "wk-…" });
  const go = () => { keys.set(key.value.trim()); route(); };
  key.addEventListener("keydown", (e) => e.key === "Enter" && go());
  replace(main, h("div", { class: "card signin" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Your API key stays in this tab's session storage. A link with ", h("code", {}, "#key=…"), " offers its key too (you are asked before it is used)."),
    h("label", { for: "api-key" }, "API key"), key,
    h("p", {}, h("button", { type: "button", id: "sign-in", onclick: go }, "Open"))));
  key.focus();
}

/** What a link's key reaches, asked with that key before it is used: its knowledge bases (the operator key:
 * the tenants). Throws the API's refusal (an unknown or revoked key). */
async function lookUp(name, key) {
  const listed = (data) => (Array.isArray(data) ? data : data.items || []);
  if (name === "operator_key") {
    const tenants = listed(await call("GET", "/admin/tenants", { operator: true, key }));
    return `the operator key; tenants: ${tenants.map((t) => t.name || t.id).join(", ") || "none"}`;
  }
  const kbs = await getAll("/knowledge-bases", { key });
  const names = kbs.slice(0, 5).map((kb) => kb.name || kb.id).join(", ");
  return kbs.length ? `knowledge bases: ${names}${kbs.length > 5 ? `, and ${kbs.length - 5} more` : ""}` : "no knowledge base yet";
}

/** The page's own question before a link's key is used: which key, and what it reaches. */
function confirmLinkKeys() {
  crumb();
  const entries = Object.entries(offered);
  const use = h("button", { type: "button", id: "link-key-use", disabled: true, onclick: () => {
    for (const [name, , store] of LINK_KEYS) if (offered[name]) store(offered[name]);
    offered = null;
    route();
  } }, "Sign in with it");
  const ignore = h("button", { type: "button", class: "secondary", id: "link-key-ignore", onclick: () => { offered = null; route(); } }, "Don't use it");
  const lines = entries.map(([name, key]) => {
    const what = LINK_KEYS.find(([n]) => n === name)[3];
    const found = h("span", { class: "muted" }, "checking…");
    return [h("li", { dataset: { linkKey: name } }, `${what} ${keyEnd(key)}: `, found), lookUp(name, key).then(
      (text) => { replace(found, text); return true; },
      (error) => { replace(found, h("span", { class: "error" }, `not usable (${error.code || error.message})`)); return false; })];
  });
  Promise.all(lines.map(([, checked]) => checked)).then((usable) => { use.disabled = !usable.every(Boolean); });
  replace(main, h("div", { class: "card signin", id: "link-keys" },
    h("h1", {}, "Sign in with the link's key?"),
    h("p", {}, "The link you opened carries a key. Use it only if you expected this link: whoever made it chose the tenant this tab will work in, and what you upload goes there."),
    h("ul", {}, lines.map(([item]) => item)),
    h("p", { class: "toolbar" }, use, ignore)));
}

/** The header names the keys this tab is signed in with (their ends), so a tab never works unseen as another. */
function showSignedIn() {
  const shown = LINK_KEYS.filter(([, stored]) => stored()).map(([, stored, , what]) => `${what} ${keyEnd(stored())}`);
  replace(document.getElementById("signed-in"), shown.length ? `signed in: ${shown.join(" · ")}` : "");
}

// ------------------------------------------------------------------ knowledge bases

async function knowledgeBases() {
  crumb();
  replace(main, h("h1", {}, "Knowledge bases"), h("p", { class: "muted" }, "Loading…"));
  const mine = generation;
  const kbs = await getAll("/knowledge-bases");
  if (stale(mine)) return;
  const body = h("tbody");
  const name = h("input", { type: "text", placeholder: "new knowledge base", id: "new-kb-name" });
  const create = async () => {
    if (!name.value.trim()) return;
    const kb = await post("/knowledge-bases", { name: name.value.trim() }).catch(failed);
    if (kb) location.hash = new URLSearchParams({ kb: kb.id }).toString();
  };
  replace(main, h("h1", {}, "Knowledge bases"),
    h("div", { class: "toolbar" }, name, h("button", { type: "button", onclick: create }, "Create")),
    kbs.length ? h("table", { id: "kb-table" },
      h("thead", {}, h("tr", {}, [["name"], ["type"], ["documents", "num"], ["by state"], ["chunks", "num"], ["bytes", "num"], ["cost", "num"], ["oldest waiting"]].map(([c, cls]) => h("th", { class: cls }, c)))),
      body) : h("p", { class: "muted" }, "No knowledge base yet: create one."));
  for (const kb of kbs) {
    const row = h("tr", { dataset: { kbId: kb.id } },
      h("td", {}, link({ kb: kb.id }, kb.name || kb.id), kb.shared ? h("div", { class: "muted" }, "shared") : null),
      h("td", {}, kb.type || "document"), h("td", { class: "num" }, "…"), h("td"), h("td", { class: "num" }), h("td", { class: "num" }), h("td", { class: "num" }), h("td"));
    body.append(row);
    get(`/knowledge-bases/${enc(kb.id)}/stats`).then((s) => {
      const cells = row.children;
      if (s.code === "report_pending") return replace(cells[2], h("span", { class: "muted", title: `task ${s.task_id}` }, "computing…"));
      replace(cells[2], s.fresh === false ? [`${s.documents}`, h("div", { class: "muted" }, `as of ${s.as_of}`)] : s.documents);
      replace(cells[3], Object.entries(s.parse_status || {}).filter(([, n]) => n).map(([state, n]) => [badge(state), ` ${n} `]));
      replace(cells[4], s.chunks); replace(cells[5], bytes(s.bytes));
      replace(cells[6], dollars((s.cost?.aws_dollars || 0) + (s.cost?.model_dollars || 0)));
      const w = s.oldest_waiting;
      replace(cells[7], w ? [w.file_name || w.knowledge_id, h("div", { class: "muted" }, `${w.queue || w.parse_status} · ${seconds(w.waited_seconds)}`)] : "—");
    }).catch(() => replace(row.children[2], "—"));
  }
}

// ------------------------------------------------------------------ one knowledge base

const KB_TABS = [["documents", "Documents"], ["search", "Search"], ["tags", "Tags"], ["faq", "FAQ"], ["settings", "Stats & settings"]];

async function knowledgeBase(kbId, tab) {
  const mine = generation;
  const kb = await get(`/knowledge-bases/${enc(kbId)}`);
  if (stale(mine)) return;
  crumb(link({ kb: kbId }, kb.name || kbId));
  const tabs = h("nav", { class: "tabs" }, KB_TABS.map(([id, label]) =>
    h("a", { href: `#${new URLSearchParams({ kb: kbId, tab: id })}`, class: id === tab ? "active" : "", dataset: { tab: id } }, label)));
  const content = h("section", { id: `tab-${tab}` });
  replace(main, h("h1", {}, kb.name || kbId), tabs, content);
  const view = { documents, search, tags, faq, settings }[tab] || documents;
  await view(kb, content);
}

async function documents(kb, content) {
  const params = fragment();
  const filters = { parse_status: params.get("state") || "", file_type: params.get("type") || "", tag_id: params.get("tag") || "" };
  const tagList = await get(`/knowledge-bases/${enc(kb.id)}/tags`).catch(() => []);
  const tagItems = Array.isArray(tagList) ? tagList : tagList.items || [];
  const setFilter = (name, value) => {
    const next = fragment();
    if (value) next.set(name, value); else next.delete(name);
    location.hash = next.toString();
  };
  const stateSelect = h("select", { id: "filter-state", onchange: (e) => setFilter("state", e.target.value) },
    h("option", { value: "" }, "every state"), STATES.map((s) => h("option", { value: s, selected: s === filters.parse_status }, s)));
  const typeInput = h("input", { type: "text", id: "filter-type", placeholder: "type (pdf, docx…)", value: filters.file_type });
  typeInput.addEventListener("change", () => setFilter("type", typeInput.value.trim()));
  const tagSelect = h("select", { id: "filter-tag", onchange: (e) => setFilter("tag", e.target.value) },
    h("option", { value: "" }, "every tag"), tagItems.map((t) => h("option", { value: t.id, selected: t.id === filters.tag_id }, t.name)));

  const selected = new Set();
  const rowsBody = h("tbody", { id: "documents" });
  const status = h("span", { class: "muted", id: "list-status" });
  const more = h("button", { type: "button", class: "secondary hidden" }, "More");
  let cursor = null;
  let rows = [];

  const bulk = (label, cls, action) => h("button", { type: "button", class: cls, onclick: async () => {
    if (!selected.size && label !== "Retry failed") return toast("select documents first");
    try { await action([...selected]); toast(`${label}: sent`); selected.clear(); await load(true); } catch (e) { failed(e); }
  } }, label);
  const targetSelect = h("select", { id: "move-target" }, h("option", { value: "" }, "move to…"));
  getAll("/knowledge-bases").then((all) => all.filter((other) => other.id !== kb.id)
    .forEach((other) => targetSelect.append(h("option", { value: other.id }, other.name || other.id)))).catch(() => {});

  const drop = uploader(kb, () => load(true));
  append(content, [drop,
    h("div", { class: "toolbar" }, stateSelect, typeInput, tagSelect, h("span", { class: "spacer" }),
      bulk("Delete", "danger", (ids) => { if (!confirm(`Delete ${ids.length} document(s)?`)) throw new Error("not deleted"); return post("/knowledge/batch-delete", { kb_id: kb.id, ids }); }),
      bulk("Reparse", "secondary", (ids) => post("/knowledge/batch-reparse", { kb_id: kb.id, ids })),
      bulk("Retry failed", "secondary", () => post(`/knowledge-bases/${enc(kb.id)}/retry-failed`, {})),
      targetSelect,
      bulk("Move", "secondary", (ids) => {
        if (!targetSelect.value) throw new Error("pick the knowledge base to move to");
        return post("/knowledge/move", { source_kb_id: kb.id, target_kb_id: targetSelect.value, ids });
      })),
    h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, h("input", { type: "checkbox", "aria-label": "select all", onchange: (e) => {
      for (const box of rowsBody.querySelectorAll("input[type=checkbox]")) { box.checked = e.target.checked; box.dispatchEvent(new Event("change")); }
    } })), [["name"], ["type"], ["state"], ["enabled"], ["chunks", "num"], ["size", "num"], ["created"], ["stage / error"]].map(([c, cls]) => h("th", { class: cls }, c)))), rowsBody),
    h("div", { class: "toolbar" }, more, status)]);

  function render() {
    replace(rowsBody, rows.map((k) => {
      const box = h("input", { type: "checkbox", checked: selected.has(k.id), "aria-label": `select ${k.file_name || k.title || k.id}` });
      box.addEventListener("change", () => (box.checked ? selected.add(k.id) : selected.delete(k.id)));
      const note = k.error_message ? h("span", { class: "error" }, `${k.error_code || "error"}: ${k.error_message}`)
        : IN_FLIGHT.has(k.parse_status) && k.queued_stage ? `at ${k.queued_stage}${k.queued_at && !Number.isNaN(Date.parse(k.queued_at))
          ? `, queued ${seconds(Math.max(0, (Date.now() - Date.parse(k.queued_at)) / 1000))} ago` : ""}` : "";
      return h("tr", { dataset: { knowledgeId: k.id, state: k.parse_status } }, h("td", {}, box),
        h("td", {}, link({ knowledge: k.id }, k.file_name || k.title || k.id)), h("td", {}, k.file_type || k.source || ""),
        h("td", {}, badge(k.parse_status)), h("td", {}, badge(k.enable_status)), h("td", { class: "num" }, k.chunk_count ?? ""),
        h("td", { class: "num" }, bytes(k.file_size)),
        h("td", {}, when(k.created_at)), h("td", {}, note));
    }));
    if (!rows.length) rowsBody.append(h("tr", {}, h("td", { colspan: 9, class: "muted" }, "No documents: drop files above.")));
  }

  /** The next page after `after` (a cursor), or the first. */
  const page = (after, size) => get(`/knowledge-bases/${enc(kb.id)}/knowledge`, { ...filters, page_size: size, cursor: after || undefined });

  /** fresh: the list read again from its start, as many rows as are shown (pages of at most LIST_MAX_PAGE), so
   * a refresh keeps what "More" loaded; else the next page. One load at a time: a click on "More" during a
   * refresh waits for it (else the refresh would replace the rows the click added). */
  let loading = Promise.resolve();
  const load = (fresh) => {
    loading = loading.catch(() => {}).then(() => loadNow(fresh));
    return loading;
  };

  async function loadNow(fresh) {
    const mine = generation;
    let got = [];
    let last = null;
    if (fresh) {
      const wanted = Math.max(LIST_PAGE, rows.length);
      do {
        last = await page(last?.next_cursor, Math.min(LIST_MAX_PAGE, wanted - got.length));
        got = got.concat(last.items);
      } while (last.has_more && last.next_cursor && got.length < wanted);
    } else {
      last = await page(cursor, LIST_PAGE);
      got = rows.concat(last.items);
    }
    if (mine !== generation) return;
    rows = got;
    cursor = last.next_cursor;
    more.classList.toggle("hidden", !last.has_more);
    render();
    const busy = rows.filter((k) => IN_FLIGHT.has(k.parse_status)).length;
    replace(status, busy ? `${busy} in flight · updating live` : `${rows.length} shown`);
    if (busy) poll(() => load(true).catch(failed), 2000);
  }
  more.addEventListener("click", () => load(false).catch(failed));
  await load(true);
}

/** Drag and drop (files and whole folders), a file picker and a folder picker; per-file progress. */
function uploader(kb, done) {
  const list = h("div", { class: "uploads", id: "uploads" });
  const input = h("input", { type: "file", multiple: true, id: "file-input", class: "picker" });
  const folder = h("input", { type: "file", multiple: true, webkitdirectory: true, id: "folder-input", class: "picker" });
  const zone = h("div", { class: "drop", id: "drop-zone" }, "Drop files or folders here, or ",
    h("button", { type: "button", class: "link", onclick: () => input.click() }, "pick files"), " / ",
    h("button", { type: "button", class: "link", onclick: () => folder.click() }, "a folder"), input, folder);
  const send = async (items) => {
    for (const { file, path } of items) {
      const bar = h("progress", { max: 1, value: 0 });
      const state = h("span", { class: "muted" }, "uploading");
      list.append(h("div", { class: "row" }, h("span", {}, path), bar, state));
      try {
        const result = await uploadFile(kb.id, file, path.split("/").pop(), (p) => { bar.value = p; });
        bar.value = 1;
        replace(state, result.presigned ? "sent (presigned), waiting for its arrival" : "sent");
        if (result.presigned) arrival(result.knowledge_id, state, list, done);
      } catch (error) {
        replace(state, refused(error));
      }
    }
    done();
  };
  const picked = (e) => send([...e.target.files].map((file) => ({ file, path: file.webkitRelativePath || file.name })));
  input.addEventListener("change", picked);
  folder.addEventListener("change", picked);
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", async (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    const entries = [...e.dataTransfer.items].map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
    const files = entries.length ? (await Promise.all(entries.map(walk))).flat()
      : [...e.dataTransfer.files].map((file) => ({ file, path: file.name }));
    send(files);
  });
  return h("div", {}, zone, list);
}

/** Why the API refused an upload, as the upload list shows it. */
const refused = (error) => h("span", { class: "error" }, error.code === "duplicate_file" ? "already there" : error.message);

/** A presigned upload followed until the API took it in or refused it: GET /knowledge/{id} answers 404
 * `upload_pending` until the object's arrival is handled, then the row, or a 404 with the refusal's code and
 * message (a duplicate, the tenant's quota, an expired URL...), which is final. Asked again after 1 s, then
 * less often (at most every 10 s), while the list is on the page; a network or server error is asked again. */
async function arrival(knowledgeId, state, list, done, wait = 1000) {
  await new Promise((resolve) => setTimeout(resolve, wait));
  if (!list.isConnected) return;
  try {
    await get(`/knowledge/${enc(knowledgeId)}`);
    replace(state, "sent (presigned), added");
    done();
    return;
  } catch (error) {
    const final = error instanceof ApiError && error.status >= 400 && error.status < 500 && error.status !== 429
      && error.code !== "upload_pending";
    if (final && error.status === 401) return failed(error);
    if (final) return replace(state, refused(error));
  }
  arrival(knowledgeId, state, list, done, Math.min(wait * 1.5, 10000));
}

/** A dropped entry's files, folders walked recursively. */
async function walk(entry, path = "") {
  if (entry.isFile) return [{ file: await new Promise((ok, no) => entry.file(ok, no)), path: `${path}${entry.name}` }];
  const reader = entry.createReader();
  const children = [];
  for (;;) {
    const batch = await new Promise((ok, no) => reader.readEntries(ok, no));
    if (!batch.length) break;
    children.push(...batch);
  }
  return (await Promise.all(children.map((c) => walk(c, `${path}${entry.name}/`)))).flat();
}

async function search(kb, content) {
  const query = h("input", { type: "search", id: "search-query", placeholder: "ask something", size: 50 });
  const count = h("input", { type: "number", min: 1, max: 100, value: 10, id: "search-count" });
  const hits = h("div", { id: "hits" });
  // the filters (hybrid-search's fields): empty ones are left out, so the API's defaults apply
  const retriever = h("select", { id: "search-retriever", "aria-label": "retriever" },
    [["hybrid", "hybrid (BM25 + vector)"], ["keyword", "keyword (BM25)"], ["vector", "vector"]].map(([v, label]) => h("option", { value: v }, label)));
  const minScore = h("input", { type: "number", id: "search-min-score", min: 0, max: 1, step: 0.05, placeholder: "0–1", size: 5 });
  const types = h("input", { type: "text", id: "search-types", placeholder: "types: pdf, md…", size: 14 });
  const meta = h("input", { type: "text", id: "search-meta", placeholder: "metadata: dept=ops; year=2024,2025", size: 30 });
  const tagList = await get(`/knowledge-bases/${enc(kb.id)}/tags`).catch(() => []);
  const tagItems = Array.isArray(tagList) ? tagList : tagList.items || [];
  const tagBoxes = tagItems.map((t) => h("input", { type: "checkbox", value: t.id, dataset: { tagId: t.id }, "aria-label": `tag ${t.name}` }));
  const tagChoices = h("span", { id: "search-tags" }, tagItems.length ? "tags: " : "",
    tagItems.map((t, i) => h("label", { class: "choice" }, tagBoxes[i], ` ${t.name}`)));
  const body = () => {
    const request = { query_text: query.value, match_count: Number(count.value) || 10, retriever: retriever.value };
    if (minScore.value !== "") request.min_score = Number(minScore.value);
    const fileTypes = types.value.split(/[\s,]+/).filter(Boolean);
    if (fileTypes.length) request.file_types = fileTypes;
    const tagIds = tagBoxes.filter((box) => box.checked).map((box) => box.value);
    if (tagIds.length) request.tag_ids = tagIds;
    const metadata = metadataFilter(meta.value);
    if (Object.keys(metadata).length) request.metadata = metadata;
    return request;
  };
  const run = async () => {
    if (!query.value.trim()) return;
    replace(hits, h("p", { class: "muted" }, "Searching…"));
    try {
      const found = await post(`/knowledge-bases/${enc(kb.id)}/hybrid-search`, body());
      const items = Array.isArray(found) ? found : found.items || found.results || [];
      replace(hits, items.length ? items.map((hit) => h("div", { class: "hit", dataset: { knowledgeId: hit.knowledge_id } },
        h("div", {}, link({ knowledge: hit.knowledge_id }, hit.knowledge_title || hit.knowledge_id), " ",
          badge(hit.match_type), h("span", { class: "muted" }, ` score ${Number(hit.score).toFixed(4)}`)),
        h("div", { class: "body" }, highlighted(hit.content || "", query.value)))) : h("p", { class: "muted", id: "no-hits" }, "No hits."));
    } catch (error) { replace(hits); failed(error); }
  };
  query.addEventListener("keydown", (e) => e.key === "Enter" && run());
  append(content, [h("div", { class: "toolbar" }, query, h("label", {}, "hits ", count), h("button", { type: "button", id: "search-run", onclick: run }, "Search")),
    h("div", { class: "toolbar", id: "search-filters" }, retriever, h("label", {}, "min score ", minScore), types, meta, tagChoices), hits]);
  query.focus();
}

async function tags(kb, content) {
  const listed = await get(`/knowledge-bases/${enc(kb.id)}/tags`);
  const items = Array.isArray(listed) ? listed : listed.items || [];
  const name = h("input", { type: "text", placeholder: "new tag" });
  const add = async () => { try { await post(`/knowledge-bases/${enc(kb.id)}/tags`, { name: name.value.trim() }); route(); } catch (e) { failed(e); } };
  append(content, [h("div", { class: "toolbar" }, name, h("button", { type: "button", onclick: add }, "Add tag")),
    table(items, [["name (its documents)", (t) => link({ kb: kb.id, tag: t.id }, t.name)], ["color", (t) => t.color || ""],
      ["created", (t) => when(t.created_at)],
      ["", (t) => h("button", { type: "button", class: "link", onclick: async () => {
        try { await del(`/knowledge-bases/${enc(kb.id)}/tags/${enc(t.id)}`); route(); } catch (e) { failed(e); }
      } }, "delete")]])]);
}

async function faq(kb, content) {
  const entriesPath = `/knowledge-bases/${enc(kb.id)}/faq/entries`;
  const first = await get(entriesPath, { limit: FAQ_PAGE }).catch((e) => { append(content, [h("p", { class: "muted" }, e.message)]); return null; });
  if (first === null) return;
  const entryRows = h("tbody", { id: "faq-entries" });
  const moreBox = h("div", { class: "toolbar" });
  /** A page of entries under the ones shown, and a button for the next while the listing has more. */
  function showEntries(page) {
    const items = Array.isArray(page) ? page : page.items || [];
    append(entryRows, items.map((e) => h("tr", { dataset: { entryId: e.id } }, h("td", {}, e.standard_question),
      h("td", {}, (e.answers || []).join(" · ")), h("td", {}, badge(e.is_enabled ? "enabled" : "disabled")))));
    if (!page.next_cursor) return;
    const more = h("button", { type: "button", class: "secondary", id: "faq-more", onclick: async () => {
      more.remove();
      try { showEntries(await get(entriesPath, { limit: FAQ_PAGE, cursor: page.next_cursor })); } catch (e) { failed(e); }
    } }, "More entries");
    moreBox.append(more);
  }
  const firstItems = Array.isArray(first) ? first : first.items || [];
  const result = h("div", { id: "faq-import" });
  const question = h("input", { type: "text", placeholder: "question" });
  const answer = h("input", { type: "text", placeholder: "answer" });
  const add = async () => {
    try { await post(`/knowledge-bases/${enc(kb.id)}/faq/entries`, { standard_question: question.value, answers: [answer.value] }); route(); } catch (e) { failed(e); }
  };
  const file = h("input", { type: "file", accept: ".json,.csv,.xlsx" });
  file.addEventListener("change", async () => {
    const chosen = file.files[0];
    if (!chosen) return;
    try {
      const target = await post(`/knowledge-bases/${enc(kb.id)}/faq/import/upload-url`, { file_name: chosen.name });
      if (chosen.size > target.max_size) throw new Error(`an FAQ import file holds at most ${target.max_size} bytes: split it`);
      // a form upload: its fields as given, the file last (storage refuses a bigger body than it was signed for)
      const form = new FormData();
      for (const [name, value] of Object.entries(target.fields || {})) form.append(name, value);
      form.append("file", chosen);
      const put = await fetch(target.url, { method: "POST", body: form });
      if (!put.ok) throw new Error(`storage answered ${put.status}`);
      const started = await post(`/knowledge-bases/${enc(kb.id)}/faq/import`, { object_key: target.object_key, mode: mode.value });
      toast("import started");
      followImport(started.task_id);
    } catch (e) { failed(e); }
  });
  const mode = h("select", {}, h("option", { value: "append" }, "append"), h("option", { value: "replace" }, "replace"));
  const counts = (p) => ["success", "failed", "partial", "skipped", "merged", "added", "deleted"]
    .filter((k) => p[k]).map((k) => `${k} ${p[k]}`).join(" · ");
  const failedRows = (p) => {
    const url = typeof p.failed_rows_download === "string" ? p.failed_rows_download : p.failed_rows_download?.url;
    return url ? h("a", { href: safeUrl(url), rel: "noreferrer" }, "failed rows (CSV)") : null;
  };
  /** A running import: the task's progress, every 2 s, until it ends; then the last result. */
  async function followImport(taskId) {
    const task = await get(`/tasks/${enc(taskId)}`).catch(failed);
    if (!task) return;
    const p = task.progress || {};
    const total = p.total ?? 0;
    const done = p.processed ?? 0;
    replace(result, h("div", {}, badge(p.status || task.status), " ", total ? `${done} / ${total} rows ` : "", total ? h("progress", { max: total, value: done }) : null,
      " ", counts(p), p.error ? h("div", { class: "error" }, p.error) : null));
    if (["queued", "running"].includes(task.status)) poll(() => followImport(taskId), 2000);
    else showImport();
  }
  async function showImport() {
    const last = await get(`/knowledge-bases/${enc(kb.id)}/faq/import/last-result`).catch(() => null);
    if (!last) { replace(result, h("p", { class: "muted" }, "No import has finished yet.")); return; }
    replace(result, h("div", {}, "Last import: ", badge(last.status), ` ${last.mode || ""} · ${last.total ?? 0} rows · ${counts(last)} · ${when(last.finished_at)} `,
      failedRows(last), last.error ? h("div", { class: "error" }, last.error) : null));
  }
  append(content, [h("h2", {}, "Import"), h("div", { class: "toolbar" }, mode, file), result,
    h("h2", {}, "Entries"), h("div", { class: "toolbar" }, question, answer, h("button", { type: "button", onclick: add }, "Add")),
    firstItems.length ? h("table", {}, h("thead", {}, h("tr", {}, ["question", "answers", "enabled"].map((c) => h("th", {}, c)))), entryRows)
      : h("p", { class: "muted" }, "Nothing here yet."),
    moreBox]);
  showEntries(first);
  showImport();
}

async function settings(kb, content) {
  const stats = await get(`/knowledge-bases/${enc(kb.id)}/stats`);
  const tile = (n, k) => h("div", { class: "stat" }, h("div", { class: "n" }, n), h("div", { class: "k" }, k));
  // a big knowledge base answers its last stored report (fresh: false, as_of), or none yet (report_pending)
  const note = stats.code === "report_pending" ? `The stats are being computed (task ${stats.task_id}): look again in a while.`
    : stats.fresh === false ? `Stats as of ${stats.as_of}${stats.refreshing ? " (refreshing)" : ""}.` : null;
  append(content, [note ? h("p", { class: "muted", id: "kb-stats-as-of" }, note) : null,
    h("div", { class: "grid", id: "kb-stats" }, tile(stats.documents, "documents"), tile(stats.chunks, "chunks"),
    tile(bytes(stats.bytes), "bytes"), tile(dollars(stats.cost?.aws_dollars), "AWS"), tile(dollars(stats.cost?.model_dollars), "models"),
    Object.entries(stats.parse_status || {}).map(([s, n]) => tile(n, s))),
    h("h2", {}, "Settings"), h("pre", { class: "text" }, JSON.stringify(kb, null, 2))]);
}

// ------------------------------------------------------------------ one document

async function knowledge(knowledgeId) {
  const params = fragment();
  const mine = generation;
  const k = await get(`/knowledge/${enc(knowledgeId)}`);
  const attempt = Number(params.get("attempt")) || k.attempt || 1;
  const kbName = await get(`/knowledge-bases/${enc(k.kb_id)}`).then((kb) => kb.name).catch(() => "knowledge base");
  if (stale(mine)) return;
  crumb(link({ kb: k.kb_id }, kbName || k.kb_id), h("span", {}, k.file_name || k.title || k.id));
  const [spans, cost] = await Promise.all([
    get(`/knowledge/${enc(knowledgeId)}/spans`, { attempt }),
    get(`/knowledge/${enc(knowledgeId)}/cost`).catch(() => null),
  ]);
  if (stale(mine)) return;
  const attempts = h("select", { id: "attempt", onchange: (e) => { const next = fragment(); next.set("attempt", e.target.value); location.hash = next.toString(); } },
    Array.from({ length: spans.latest_attempt || 1 }, (_, i) => h("option", { value: i + 1, selected: i + 1 === attempt }, `attempt ${i + 1}`)));
  const download = (kind) => h("button", { type: "button", class: "secondary", id: `download-${kind}`, onclick: async () => {
    try {
      const f = await get(`/knowledge/${enc(knowledgeId)}/file-url`, { kind });
      const a = h("a", { href: safeUrl(f.url), download: f.file_name, rel: "noreferrer" });
      document.body.append(a); a.click(); a.remove();
    } catch (e) { failed(e); }
  } }, kind === "original" ? "Download original" : "Download Markdown");
  const actions = h("div", { class: "toolbar" }, badge(k.parse_status), badge(k.enable_status), attempts, download("original"), download("parsed"),
    h("button", { type: "button", class: "secondary", onclick: async () => { try { await post(`/knowledge/${enc(knowledgeId)}/reparse`, {}); route(); } catch (e) { failed(e); } } }, "Reparse"),
    IN_FLIGHT.has(k.parse_status) ? h("button", { type: "button", class: "secondary", onclick: async () => { try { await post(`/knowledge/${enc(knowledgeId)}/cancel`, {}); route(); } catch (e) { failed(e); } } }, "Cancel") : null,
    h("button", { type: "button", class: "danger", id: "delete-knowledge", onclick: async () => {
      if (!confirm("Delete this document?")) return;
      try { await del(`/knowledge/${enc(knowledgeId)}`); toast("deleted"); location.hash = new URLSearchParams({ kb: k.kb_id }).toString(); } catch (e) { failed(e); }
    } }, "Delete"));
  const error = spans.last_error ? h("p", { class: "error", id: "last-error" }, `${spans.last_error.stage ? `${spans.last_error.stage}: ` : ""}${spans.last_error.code || ""} ${spans.last_error.message || ""}`) : null;
  const chunks = h("div", { id: "chunks" }, h("p", { class: "muted" }, "Loading chunks…"));
  const markdown = h("pre", { class: "text", id: "markdown" }, "…");
  replace(main, h("h1", {}, k.file_name || k.title || k.id), actions, error,
    h("h2", {}, "Stages"), gantt(spans, cost), costLine(cost),
    h("h2", {}, "Chunks"), chunks, h("h2", {}, "Parsed Markdown"), markdown);
  loadChunks(knowledgeId, chunks);
  get(`/knowledge/${enc(knowledgeId)}/file-url`, { kind: "parsed" })
    .then((f) => fetch(safeUrl(f.url), { credentials: "omit", referrerPolicy: "no-referrer" }))
    .then((r) => (r.ok ? r.text() : Promise.reject(new Error(`HTTP ${r.status}`))))
    .then((text) => replace(markdown, text))
    .catch((e) => replace(markdown, e.code === "file_not_found" ? "No parsed Markdown (yet)." : `Not available: ${e.message}`));
  if (IN_FLIGHT.has(k.parse_status) && attempt === k.attempt) poll(() => route(), 2500);
}

/** A link the API gave (presigned, or this origin's /r/{token}): http(s) only, never javascript: or data:. */
function safeUrl(url) {
  const parsed = new URL(url, location.href);
  if (parsed.protocol !== "https:" && parsed.protocol !== "http:") throw new Error(`refused a ${parsed.protocol} link`);
  return parsed.href;
}

function spanSeconds(s, now) {
  if (!s.started_at) return null;
  const end = s.ended_at ? Date.parse(s.ended_at) : now;
  return (end - Date.parse(s.started_at)) / 1000;
}

function gantt(spans, cost) {
  const now = Date.now();
  const all = spans.trace.flatMap((s) => [s, ...(s.children || [])]).filter((s) => s.started_at);
  const start = Math.min(...all.map((s) => Date.parse(s.started_at)), now);
  const end = Math.max(...all.map((s) => (s.ended_at ? Date.parse(s.ended_at) : now)), start + 1);
  const span = end - start;
  const stageCost = (id) => (cost?.stages || cost?.by_stage || {})[id];
  const row = (s, child) => {
    const bar = h("div", { class: `bar ${s.status}` });
    if (s.started_at) {
      bar.style.left = `${((Date.parse(s.started_at) - start) / span) * 100}%`;
      bar.style.width = `${(((s.ended_at ? Date.parse(s.ended_at) : now) - Date.parse(s.started_at)) / span) * 100}%`;
    }
    const c = stageCost(s.span_id);
    const usage = Object.entries(s.usage || {});
    return h("div", { class: `row${child ? " child" : ""}`, dataset: { span: s.span_id, status: s.status } },
      h("div", { class: "label" }, s.name || s.span_id, " ", child ? null : badge(s.status)),
      h("div", { class: "track", title: `${s.started_at || ""} → ${s.ended_at || ""}` }, bar),
      h("div", { class: "meta" }, [seconds(spanSeconds(s, now)), progressText(s.progress),
        c !== undefined ? (typeof c === "number" ? dollars(c) : JSON.stringify(c)) : ""].filter(Boolean).join(" · "),
        usage.length ? h("details", {}, h("summary", {}, "usage"), usage.map(([k, v]) => h("div", {}, `${k}: ${v}`))) : null,
        s.error_message ? h("div", { class: "error" }, `${s.error_code}: ${s.error_message}`) : null));
  };
  return h("div", { class: "gantt card", id: "timeline" }, spans.trace.flatMap((s) => [row(s, false), ...(s.children || []).slice(0, 50).map((c) => row(c, true))]));
}

/** A stage's progress as a person reads it: "3/10 pages (30%), 12 s left". */
function progressText(p) {
  if (!p) return "";
  const done = p.done ?? p.subtasks_done ?? p.pages_done;
  const total = p.total ?? p.subtasks_total ?? p.pages_total;
  const parts = [];
  if (done !== undefined && total !== undefined) parts.push(`${done}/${total}${p.unit ? ` ${p.unit}` : ""}`);
  if (typeof p.percent === "number" && p.percent < 100) parts.push(`${Math.round(p.percent)}%`);
  if (typeof p.eta_seconds === "number" && p.eta_seconds > 0) parts.push(`${seconds(p.eta_seconds)} left`);
  return parts.join(", ");
}

function costLine(cost) {
  if (!cost) return null;
  const parts = Object.entries(cost).filter(([k, v]) => k !== "knowledge_id" && (typeof v === "number" || typeof v === "string")).map(([k, v]) => `${k}: ${typeof v === "number" && k.includes("dollar") ? dollars(v) : v}`);
  return h("p", { class: "muted", id: "cost" }, parts.join(" · "));
}

async function loadChunks(knowledgeId, box, cursor = null) {
  try {
    const page = await get(`/knowledge/${enc(knowledgeId)}/chunks`, { limit: 50, cursor });
    const items = Array.isArray(page) ? page : page.items || page.chunks || [];
    if (!cursor) replace(box);
    if (!items.length && !cursor) box.append(h("p", { class: "muted" }, "No chunks (yet)."));
    for (const c of items) {
      box.append(h("div", { class: "chunk", dataset: { chunkId: c.id } },
        h("div", { class: "head" }, `#${c.chunk_index ?? ""} · ${c.chunk_type || "text"} · ${c.start_at ?? ""}–${c.end_at ?? ""}`, c.is_enabled === false ? " · off" : ""),
        h("div", { class: "body" }, c.content)));
    }
    if (page.next_cursor) {
      const more = h("button", { type: "button", class: "secondary", onclick: () => { more.remove(); loadChunks(knowledgeId, box, page.next_cursor); } }, "More chunks");
      box.append(more);
    }
  } catch (error) {
    replace(box, h("p", { class: "muted" }, error.code === "chunk_not_found" ? "No chunks (yet)." : error.message));
  }
}

// ------------------------------------------------------------------ operators

async function admin(notice = null) {
  crumb(h("span", {}, "operators"));
  if (!keys.operator()) {
    const key = h("input", { type: "password", id: "operator-key", autocomplete: "off" });
    const go = () => { keys.setOperator(key.value.trim()); route(); };
    replace(main, h("div", { class: "card signin" }, h("h1", {}, "Operator key"), h("label", { for: "operator-key" }, "X-Operator-Key"), key,
      h("p", {}, h("button", { type: "button", onclick: go }, "Open"))));
    return;
  }
  const mine = generation;
  const [tenantItems, dlq] = await Promise.all([getAll("/admin/tenants", { operator: true }), deadLetters().catch((e) => ({ error: e.message }))]);
  if (stale(mine)) return;
  const keysBox = h("div", { id: "tenant-keys" });
  const showKeys = async (tenantId) => {
    const items = await getAll(`/admin/tenants/${enc(tenantId)}/api-keys`, { operator: true });
    const name = h("input", { type: "text", placeholder: "key name" });
    const scope = h("select", {}, ["admin", "write", "read"].map((v) => h("option", { value: v }, v)));
    const shown = h("div");
    const issue = async () => {
      try {
        const made = await post(`/admin/tenants/${enc(tenantId)}/api-keys`, { name: name.value.trim(), scope: scope.value }, true);
        await showKeys(tenantId);
        replace(keysBox.querySelector(".issued"), h("p", {}, "The new key, shown only now: ", h("code", { id: "issued-key" }, made.api_key)));
      } catch (e) { failed(e); }
    };
    replace(keysBox, h("h2", {}, `Keys of ${tenantId}`),
      h("div", { class: "toolbar" }, name, scope, h("button", { type: "button", onclick: issue }, "Issue a key")), h("div", { class: "issued" }, shown),
      table(items, [["name", (k) => k.name || "—"], ["id", (k) => k.id], ["scope", (k) => k.scope],
        ["knowledge bases", (k) => (k.kb_ids ? k.kb_ids.join(", ") : "all")], ["status", (k) => badge(k.status)],
        ["created", (k) => when(k.created_at)],
        ["", (k) => (k.status === "revoked" ? "" : h("button", { type: "button", class: "link", onclick: async () => {
          if (!confirm(`Revoke key ${k.name || k.id}?`)) return;
          try { await del(`/admin/tenants/${enc(tenantId)}/api-keys/${enc(k.id)}`, true); showKeys(tenantId); } catch (e) { failed(e); }
        } }, "revoke"))]]));
  };
  const tenantName = h("input", { type: "text", placeholder: "new tenant" });
  const createTenant = async () => {
    try {
      const made = await post("/admin/tenants", { name: tenantName.value.trim() }, true);
      await admin(h("p", { class: "card" }, `Tenant ${made.tenant?.name || ""} created. Its first key, shown only now: `,
        h("code", { id: "issued-key" }, made.api_key || "")));
    } catch (e) { failed(e); }
  };
  const letters = dlq.error ? [] : dlq.letters;
  const byQueue = dlq.error ? [] : dlq.queues.filter((q) => q.listed || !q.complete);
  const redrive = (queue) => h("button", { type: "button", class: "secondary", onclick: async () => {
    try {
      const r = await post("/admin/dlq/redrive", queue ? { queue } : {}, true);
      toast(`redriven: ${Object.entries(r.counts || {}).map(([k, n]) => `${k} ${n}`).join(", ") || "nothing"}`);
      route();
    } catch (e) { failed(e); }
  } }, queue ? `Redrive ${queue}` : "Redrive all");
  replace(main, h("h1", {}, "Operators"), notice,
    h("h2", {}, "Tenants"),
    h("div", { class: "toolbar" }, tenantName, h("button", { type: "button", onclick: createTenant }, "Create tenant")),
    table(tenantItems, [["tenant", (t) => h("button", { type: "button", class: "link", onclick: () => showKeys(t.id).catch(failed) }, t.name || t.id)],
      ["id", (t) => t.id], ["documents", (t) => `${t.document_count ?? ""}${t.document_quota ? ` / ${t.document_quota}` : ""}`, "num"],
      ["storage", (t) => `${bytes(t.storage_used)}${t.storage_quota ? ` / ${bytes(t.storage_quota)}` : ""}`, "num"],
      ["created", (t) => when(t.created_at)]]),
    keysBox,
    h("h2", {}, "Dead-letter queues"),
    dlq.error ? h("p", { class: "error" }, dlq.error) : h("div", { id: "dlq" },
      h("div", { class: "toolbar" }, byQueue.map((q) => [h("span", {}, `${q.queue}: ${q.listed}${q.complete ? "" : "+"}`), redrive(q.queue)]),
        byQueue.length ? redrive(null) : null),
      dlq.cut ? h("p", { class: "muted", id: "dlq-cut" }, `The table shows the first ${letters.length} letters only; `,
        byQueue.some((q) => !q.complete) ? "a count with + is where a queue's listing stopped (it holds more)." : "the counts are each queue's own.") : null,
      table(letters, [["queue", (l) => l.queue], ["document", (l) => l.knowledge_id || "—"], ["attempt", (l) => l.attempt ?? "—", "num"],
        ["state", (l) => (l.row ? badge(l.row.parse_status) : "—")], ["reason", (l) => l.reason],
        ["error", (l) => (l.row && l.row.error_message ? `${l.row.error_code}: ${l.row.error_message}` : "")],
        ["sent", (l) => (l.sent_at_ms ? when(new Date(l.sent_at_ms).toISOString()) : "—")]], "No dead letters.")),
    h("p", {}, h("button", { type: "button", class: "secondary", onclick: () => { keys.setOperator(null); route(); } }, "Forget the operator key")));
}

/** The dead letters (the first DLQ_LIST) and each queue's count. One listing of every queue first; a queue it
 * cut or never reached is listed again on its own (up to the API's DLQ_QUEUE_LIST), so each count is that
 * queue's, and `complete: false` is left only on a queue holding more than that (or one whose own listing
 * failed: its count from the first listing, with its +). `cut`: the letters shown are not all. */
async function deadLetters() {
  const first = await call("GET", "/admin/dlq", { operator: true, whole: true, query: { limit: DLQ_LIST } });
  const letters = Array.isArray(first.data) ? first.data : [];
  const queues = await Promise.all((first.queues || []).map((q) => (q.complete ? q
    : call("GET", "/admin/dlq", { operator: true, whole: true, query: { queue: q.queue, limit: DLQ_QUEUE_LIST } })
      .then((alone) => (alone.queues || []).find((a) => a.queue === q.queue) || q, () => q))));
  return { letters, queues, cut: queues.some((q) => !q.complete) || queues.reduce((n, q) => n + q.listed, 0) > letters.length };
}

// ------------------------------------------------------------------ routing

async function route() {
  generation += 1;
  const mine = generation;
  clearTimeout(timer);
  takeKeysFromFragment();
  showSignedIn();
  if (offered) return confirmLinkKeys();
  if (!keys.get() && fragment().get("view") !== "admin") return signIn();
  const params = fragment();
  try {
    if (params.get("view") === "admin") await admin();
    else if (params.get("knowledge")) await knowledge(params.get("knowledge"));
    else if (params.get("kb")) await knowledgeBase(params.get("kb"), params.get("tab") || "documents");
    else await knowledgeBases();
  } catch (error) {
    failed(error);
    if (stale(mine)) return;
    if (!main.childElementCount || main.textContent === "Loading…") replace(main, h("p", { class: "error" }, error.message));
  }
}

document.getElementById("sign-out").addEventListener("click", () => { keys.clear(); location.hash = ""; route(); });
window.addEventListener("hashchange", route);
document.documentElement.dataset.api = API;
route();
