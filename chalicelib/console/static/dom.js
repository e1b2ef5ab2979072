// DOM helpers: every string goes in as text (textContent), never as HTML.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function badge(state) {
  const value = String(state ?? "");
  return h("span", { class: `badge s-${value.replace(/[^a-z_-]/gi, "")}`, dataset: { state: value } }, value || "—");
}

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

export function dollars(n) {
  if (n === null || n === undefined) return "—";
  return `$${Number(n).toFixed(Number(n) < 0.01 && Number(n) > 0 ? 6 : 4)}`;
}

export function seconds(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "—";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

/** A table of objects: columns are [label, row => cell, className?]. */
export function table(rows, columns, empty = "Nothing here yet.") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([label, , cls]) => h("th", { class: cls }, label)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell, cls]) => h("td", { class: cls }, cell(row)))))));
}

/** Text with the query's terms wrapped in <mark> (built node by node: the text stays text). */
export function highlighted(text, query) {
  const terms = [...new Set(String(query).toLowerCase().split(/\s+/).filter((t) => t.length > 1))];
  const out = h("span");
  if (!terms.length) return append(out, [text]);
  const escaped = terms.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const pattern = new RegExp(`(${escaped.join("|")})`, "gi");
  for (const part of String(text).split(pattern)) {
    if (!part) continue;
    out.append(terms.includes(part.toLowerCase()) ? h("mark", {}, part) : document.createTextNode(part));
  }
  return out;
}

export function toast(message, isError = false) {
  const box = document.getElementById("toast");
  const item = h("div", { class: isError ? "error" : "" }, message);
  box.append(item);
  setTimeout(() => item.remove(), isError ? 8000 : 4000);
}
