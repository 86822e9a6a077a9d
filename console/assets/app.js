// orderlog console: a single-page application over the node's HTTP API.
// Every element is built with the DOM API (textContent, never innerHTML),
// so that no message, key or header can inject markup.
"use strict";

const TOKEN_KEY = "orderlog.token";
const POLL_MS = 2000;

// ---------- small helpers ----------

// h builds an element: h("td", {class: "num"}, "42").
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

function fmtInt(n) { return n === undefined || n === null ? "–" : Number(n).toLocaleString("en-US"); }
function fmtRate(n) { return n === undefined || n === null || !isFinite(n) ? "–" : (n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1)); }
function fmtBytes(n) {
  if (n === undefined || n === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; n = Number(n);
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}
function fmtMs(seconds) { return seconds === undefined || seconds === null || !isFinite(seconds) ? "–" : (seconds * 1000).toFixed(2) + " ms"; }
function fmtDuration(ms) {
  if (!ms) return "none of its own";
  if (ms < 0) return "forever";
  const hours = ms / 3600000;
  return hours >= 1 ? hours.toFixed(hours % 1 ? 1 : 0) + " h" : Math.round(ms / 1000) + " s";
}

// ---------- API access ----------

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

// api calls the node's HTTP API with the session's token and returns the
// decoded JSON answer, or throws an ApiError with the API's code.
async function api(path, options) {
  const init = Object.assign({headers: {}}, options || {});
  if (token()) init.headers["Authorization"] = "Bearer " + token();
  if (init.json !== undefined) {
    init.body = JSON.stringify(init.json);
    init.headers["Content-Type"] = "application/json";
    delete init.json;
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, "UNREACHABLE", "the node does not answer (" + e.message + ")");
  }
  const text = await resp.text();
  if (!resp.ok) {
    let code = "HTTP_" + resp.status, message = text.trim();
    try { const body = JSON.parse(text); if (body.error) { code = body.error.code; message = body.error.message; } } catch (_) { /* not JSON */ }
    throw new ApiError(resp.status, code, message);
  }
  return path === "/metrics" || path === "/readyz" ? text : JSON.parse(text);
}

// apiless is set once this node is known to serve no /v1 API of its own
// (no ingest role: /v1/status, /v1/messages and /v1/topics are not
// mounted): the session's roles say so, or such a route answered 404.
let apiless = null; // {endpoints: the ingest nodes' gRPC addresses, if known}

function noApiText() {
  const eps = (apiless && apiless.endpoints) || [];
  return "This node serves no API (it has no ingest role): /v1/status, /v1/messages and /v1/topics are not there. " +
    "Open the console on an ingest node" + (eps.length ? ", on the HTTP port of one of " + eps.join(", ") + " (their gRPC addresses)." : ".");
}

function showError(err) {
  const box = document.getElementById("error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  if (err.code === "HTTP_404") { // a route this node does not mount
    apiless = apiless || {endpoints: []};
    box.textContent = noApiText();
    box.hidden = false;
    return;
  }
  let text = err.code ? err.code + ": " + err.message : String(err.message || err);
  if (err.status === 401) text += " — paste a token above (orderlog auth token create).";
  if (err.status === 403) text += " — the token's principal lacks the ACL for this.";
  box.textContent = text;
  box.hidden = false;
}

// guarded runs an async page action, showing what goes wrong instead of
// throwing into the browser's log; it returns the error, if any.
async function guarded(fn) {
  try { await fn(); return null; } catch (e) { showError(e); return e; }
}

// ---------- Prometheus text ----------

// parseMetrics turns /metrics text into [{name, labels, value}].
function parseMetrics(text) {
  const out = [];
  const re = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/;
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = re.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({name: m[1], labels, value: parseFloat(m[4])});
  }
  return out;
}

function metric(samples, name, labels) {
  const s = samples.find(x => x.name === name && Object.entries(labels || {}).every(([k, v]) => x.labels[k] === v));
  return s ? s.value : undefined;
}

// buckets returns a histogram's cumulative [le, count] pairs.
function buckets(samples, name) {
  return samples.filter(s => s.name === name + "_bucket")
    .map(s => [s.labels.le === "+Inf" ? Infinity : parseFloat(s.labels.le), s.value])
    .sort((a, b) => a[0] - b[0]);
}

// quantile estimates quantile q of the observations between two scrapes
// of a histogram, interpolating linearly inside the bucket (as PromQL's
// histogram_quantile does).
function quantile(q, now, before) {
  const delta = now.map(([le, c], i) => [le, c - (before[i] ? before[i][1] : 0)]);
  const total = delta.length ? delta[delta.length - 1][1] : 0;
  if (total <= 0) return undefined;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, c] of delta) {
    if (c >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * ((rank - prevCount) / Math.max(c - prevCount, 1e-9));
    }
    prevLe = le; prevCount = c;
  }
  return prevLe;
}

// ---------- router ----------

let cleanup = () => {};

const routes = {
  "/ui/": overviewPage,
  "/ui/messages": messagesPage,
  "/ui/tail": tailPage,
  "/ui/topics": topicsPage,
  "/ui/consumers": consumersPage,
  "/ui/producers": producersPage,
  "/ui/archive": archivePage,
};

function navigate(url) {
  history.pushState(null, "", url);
  render();
}

function render() {
  cleanup();
  cleanup = () => {};
  showError(null);
  const path = location.pathname.replace(/\/$/, "") || "/ui";
  const page = routes[path === "/ui" ? "/ui/" : path] || overviewPage;
  for (const a of document.querySelectorAll("nav a")) {
    const target = new URL(a.href).pathname.replace(/\/$/, "");
    if (target === path) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const main = document.getElementById("main");
  main.replaceChildren();
  if (apiless && NEEDS_API.has(page)) {
    main.append(h("p", {class: "note", id: "no-api"}, noApiText()));
    return;
  }
  page(main, new URLSearchParams(location.search));
}

// Same-origin links under /ui/ stay in the page.
document.addEventListener("click", e => {
  const a = e.target.closest && e.target.closest("a");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith("/ui")) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
  document.getElementById("main").focus();
});
window.addEventListener("popstate", render);

// replaceKeepingFocus replaces el's children with children; if a link or
// button inside el had the focus, the new one with the same id or href
// gets it back, so that a page refreshing itself does not throw a
// keyboard user back to the top.
function replaceKeepingFocus(el, children) {
  const active = document.activeElement;
  let again = null;
  if (active && active !== el && el.contains(active)) {
    if (active.id) again = "#" + CSS.escape(active.id);
    else if (active.getAttribute("href")) again = `a[href="${CSS.escape(active.getAttribute("href"))}"]`;
  }
  el.replaceChildren(...children.filter(c => c));
  const next = again && el.querySelector(again);
  if (next) next.focus({preventScroll: true});
}

// shown resolves at once while the tab is visible, else when it is shown
// again: no page polls the node from a hidden tab.
function shown() {
  if (!document.hidden) return Promise.resolve();
  return new Promise(resolve => {
    const onChange = () => {
      if (document.hidden) return;
      document.removeEventListener("visibilitychange", onChange);
      resolve();
    };
    document.addEventListener("visibilitychange", onChange);
  });
}

// every runs fn now and then every ms while the page is shown, pausing
// while the tab is hidden.
function every(ms, fn) {
  let stopped = false, timer = 0;
  const tick = async () => {
    await shown();
    if (stopped) return;
    const err = await guarded(fn);
    if (err && err.code === "HTTP_404") return; // the node has no such route: asking again will not help
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  const stop = () => { stopped = true; clearTimeout(timer); };
  const previous = cleanup;
  cleanup = () => { stop(); previous(); };
  return stop;
}

// ---------- session ----------

async function showSession() {
  const who = document.getElementById("whoami");
  try {
    const s = await api("/v1/console/session");
    who.textContent = s.auth_enabled ? "as " + (s.principal || "?") : "authentication off";
    apiless = (s.roles || []).includes("ingest") ? null : {endpoints: s.ingest_endpoints || []};
  } catch (e) {
    who.textContent = e.status === 401 ? "token needed" : "";
  }
}

function setupToken() {
  const form = document.getElementById("token-form");
  const input = document.getElementById("token");
  form.addEventListener("submit", e => {
    e.preventDefault();
    if (input.value.trim()) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    showSession().then(render);
  });
  document.getElementById("token-forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showSession().then(render);
  });
}

// ---------- Overview ----------

// history of metric scrapes, kept while the console is open (5 minutes).
const scrapes = [];
const MAX_SCRAPES = 150;

function overviewPage(main) {
  main.append(h("h1", {}, "Overview"));
  const cards = h("div", {class: "grid"});
  const charts = h("div", {class: "grid"});
  const byCode = h("div", {id: "errors-by-code"});
  const refusals = h("div", {});
  const cluster = h("div", {id: "cluster"});
  main.append(cards, h("h2", {id: "h-cluster"}, "Cluster"), cluster, h("h2", {}, "Last minutes"), charts,
    h("h2", {id: "h-errors"}, "Refused frames by error code"), byCode, h("h2", {}, "Other refusals and errors"), refusals);
  every(CLUSTER_POLL_MS, async () => {
    replaceKeepingFocus(cluster, clusterView(await api("/v1/console/cluster")));
  });
  every(POLL_MS, async () => {
    const [status, text, ready] = await Promise.all([api("/v1/status"), api("/metrics"),
      api("/readyz").then(() => true, () => false)]);
    scrapes.push({t: Date.now() / 1000, samples: parseMetrics(text), committed: status.committed});
    while (scrapes.length > MAX_SCRAPES) scrapes.shift();
    replaceKeepingFocus(cards, overviewCards(status, scrapes[scrapes.length - 1].samples, ready));
    charts.replaceChildren(...overviewCharts());
    byCode.replaceChildren(...errorsByCode());
    refusals.replaceChildren(...refusalTable(scrapes[scrapes.length - 1].samples));
  });
}

// CLUSTER_POLL_MS: the cluster view asks every store's node for its
// health, so it is asked less often than the node's own figures.
const CLUSTER_POLL_MS = 10000;

// clusterView is the sequencer's leader and every registered store (one
// per node) with the answer of its health check.
function clusterView(d) {
  const rows = (d.stores || []).map(st => h("tr", {},
    h("td", {}, st.address + (st.self ? " (this node)" : "")),
    h("td", {}, st.store_id),
    h("td", {}, st.health === "SERVING" ? h("span", {class: "ok"}, "serving") : h("span", {class: "bad"}, st.health)),
    h("td", {}, st.damaged ? h("span", {class: "bad"}, "journal damaged") : "ok")));
  return [
    kv([["Sequencer leader", d.sequencer_leader || h("span", {class: "bad"}, "none"), "leader"]]),
    h("table", {"aria-labelledby": "h-cluster"},
      h("thead", {}, h("tr", {}, h("th", {}, "Node (gRPC)"), h("th", {}, "Store"), h("th", {}, "Health"), h("th", {}, "Journal"))),
      h("tbody", {}, ...rows)),
    d.more_stores ? h("p", {class: "muted"}, "More stores are registered than are shown.") : null,
  ];
}

function kv(pairs) {
  return h("dl", {class: "kv"}, pairs.filter(p => p).flatMap(([k, v, id]) => [h("dt", {}, k), h("dd", {id: id}, v)]));
}

function rateOf(fn) {
  if (scrapes.length < 2) return undefined;
  const a = scrapes[scrapes.length - 2], b = scrapes[scrapes.length - 1];
  const va = fn(a), vb = fn(b);
  if (va === undefined || vb === undefined || b.t <= a.t) return undefined;
  return Math.max(0, (vb - va) / (b.t - a.t));
}

function overviewCards(st, samples, ready) {
  const roles = samples.filter(s => s.name === "orderlog_role_ready");
  const cRate = rateOf(s => s.committed);
  const cards = [
    h("section", {class: "card", "aria-labelledby": "h-log"}, h("h2", {id: "h-log"}, "Log"), kv([
      ["Sequencer epoch", fmtInt(st.epoch), "epoch"],
      ["Committed watermark C", fmtInt(st.committed), "committed"],
      ["C advancing", fmtRate(cRate) + " offsets/s"],
      ["Reserved up to", fmtInt(st.reserved)],
      ["Log start", fmtInt(st.log_start || 0)],
      ["Hole offsets", fmtInt(st.hole_offsets || 0), "holes"],
      ["Producers on this node", h("a", {href: "/ui/producers"}, fmtInt(st.producers || 0))],
      ["Oldest message", st.oldest_message_age_ms !== undefined ? (st.oldest_message_age_ms / 1000).toFixed(1) + " s ago" : "–"],
    ])),
    h("section", {class: "card", "aria-labelledby": "h-node"}, h("h2", {id: "h-node"}, "This node"), kv([
      ["Ready", ready ? h("span", {class: "ok"}, "ready") : h("span", {class: "bad"}, "not ready"), "ready"],
      ...roles.map(r => ["Role " + r.labels.role, r.value === 1 ? h("span", {class: "ok"}, "ready") : h("span", {class: "bad"}, "not ready")]),
      ["Version", st.version || "–"],
      ["Nodes", (st.endpoints || []).join(", ") || "–"],
    ])),
    h("section", {class: "card", "aria-labelledby": "h-store"}, h("h2", {id: "h-store"}, "Store"), kv([
      ["WAL bytes", fmtBytes(st.store_bytes)],
      ["Journal bytes", fmtBytes(st.journal_bytes)],
      ["Ledgers", fmtInt(st.ledgers)],
      ["Ledgers in this store", fmtInt(st.store_ledgers)],
      ["Disk used", st.disk_used_fraction !== undefined ? (st.disk_used_fraction * 100).toFixed(1) + " % of " + fmtBytes(st.disk_total_bytes) : "–"],
      ["Disk full", st.disk_full ? h("span", {class: "bad"}, "full: refusing new messages") : h("span", {class: "ok"}, "no")],
    ])),
  ];
  const archived = metric(samples, "orderlog_tiering_archived_watermark");
  if (archived !== undefined) {
    cards.push(h("section", {class: "card", "aria-labelledby": "h-archive"}, h("h2", {id: "h-archive"}, "Archive"), kv([
      ["Archived watermark T", h("a", {href: "/ui/archive"}, fmtInt(archived)), "archived"],
      ["Not yet archived", fmtInt(Math.max(0, (st.committed || 0) - archived)) + " offsets"],
      ["Files written", fmtInt(metric(samples, "orderlog_tiering_files_total"))],
      ["Bytes written", fmtBytes(metric(samples, "orderlog_tiering_bytes_total"))],
    ])));
  }
  return cards;
}

// series returns, per scrape after the first, [t, value] computed from it
// and the one before.
function series(fn) {
  const out = [];
  for (let i = 1; i < scrapes.length; i++) {
    const v = fn(scrapes[i], scrapes[i - 1]);
    if (v !== undefined && isFinite(v)) out.push([scrapes[i].t, v]);
  }
  return out;
}

function counterRate(name) {
  return (b, a) => {
    const vb = metric(b.samples, name), va = metric(a.samples, name);
    return vb === undefined || va === undefined ? undefined : Math.max(0, (vb - va) / (b.t - a.t));
  };
}

function latency(q, name) {
  return (b, a) => quantile(q, buckets(b.samples, name), buckets(a.samples, name));
}

function overviewCharts() {
  return [
    chart("Messages logged per second", [
      {label: "msg/s", color: "#0b57d0", points: series(counterRate("orderlog_ingest_logged_messages_total"))},
    ], fmtRate),
    chart("C advance, offsets per second", [
      {label: "offsets/s", color: "#11623a", points: series((b, a) => Math.max(0, (b.committed - a.committed) / (b.t - a.t)))},
    ], fmtRate),
    chart("Ack latency", [
      {label: "p50", color: "#0b57d0", points: series(latency(0.5, "orderlog_ingest_ack_latency_seconds"))},
      {label: "p99", color: "#b42318", points: series(latency(0.99, "orderlog_ingest_ack_latency_seconds"))},
    ], fmtMs),
  ];
}

// chart draws lines over the scrape history as an SVG with a text
// summary (the latest values) for screen readers and the eye.
function chart(title, lines, fmt) {
  const width = 300, height = 100;
  const all = lines.flatMap(l => l.points);
  const max = Math.max(1e-9, ...all.map(p => p[1]));
  const t0 = scrapes.length ? scrapes[0].t : 0, t1 = scrapes.length ? scrapes[scrapes.length - 1].t : 1;
  const box = svg("svg", {class: "chart", viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none", "aria-hidden": "true"});
  for (const l of lines) {
    const pts = l.points.map(([t, v]) => `${((t - t0) / Math.max(t1 - t0, 1e-9) * width).toFixed(1)},${(height - 4 - v / max * (height - 8)).toFixed(1)}`);
    box.append(svg("polyline", {points: pts.join(" "), stroke: l.color}));
  }
  const legend = h("div", {class: "legend"}, lines.map(l => {
    const last = l.points.length ? l.points[l.points.length - 1][1] : undefined;
    const swatch = svg("svg", {class: "swatch", width: 12, height: 12, "aria-hidden": "true"});
    swatch.append(svg("rect", {width: 12, height: 12, fill: l.color}));
    return h("span", {}, swatch, `${l.label} now ${fmt(last)}`);
  }));
  return h("figure", {class: "card"}, h("figcaption", {}, h("strong", {}, title), h("span", {class: "muted"}, ` (max ${fmt(max)})`)), box, legend);
}

// REFUSED is the counter of produce frames refused, labelled by the API
// error code the producer got (internal/apierr's catalogue).
const REFUSED = "orderlog_ingest_refused_frames_total";
const CODE_COLORS = ["#b42318", "#0b57d0", "#11623a", "#7a3db8", "#8a5a00"];

// refusedByCode is each code's count in a scrape.
function refusedByCode(scrape) {
  const out = {};
  for (const s of scrape.samples) if (s.name === REFUSED && s.labels.code) out[s.labels.code] = s.value;
  return out;
}

// errorsByCode is the refused frames of each code since the node started,
// their rate over the scrapes kept (the last minutes) and now, and a chart
// of the rates of the codes with the most. A code missing from an older
// scrape counted 0 then: its counter is made at its first refusal.
function errorsByCode() {
  if (!scrapes.length) return [];
  const last = scrapes[scrapes.length - 1], first = scrapes[0];
  const now = refusedByCode(last), then = refusedByCode(first);
  const codes = Object.keys(now).sort((a, b) => now[b] - now[a] || a.localeCompare(b));
  if (!codes.length) return [h("p", {class: "muted"}, "No produce frame refused since the node started.")];
  const span = last.t - first.t;
  const windowRate = code => span > 0 ? Math.max(0, (now[code] - (then[code] || 0)) / span) : undefined;
  const codeRate = code => (b, a) => b.t > a.t ? Math.max(0, ((refusedByCode(b)[code] || 0) - (refusedByCode(a)[code] || 0)) / (b.t - a.t)) : undefined;
  const minutes = Math.max(1, Math.round(span / 60));
  const table = h("table", {id: "refused-codes"},
    h("caption", {}, `Produce frames refused (${REFUSED}), by the API error code the producer got`),
    h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Code"), h("th", {scope: "col", class: "num"}, "Since the node started"),
      h("th", {scope: "col", class: "num"}, span > 0 ? `Per second, last ${minutes} min` : "Per second"),
      h("th", {scope: "col", class: "num"}, "Per second now"))),
    h("tbody", {}, codes.map(code => {
      const pts = series(codeRate(code));
      return h("tr", {"data-code": code}, h("td", {}, h("code", {}, code)), h("td", {class: "num"}, fmtInt(now[code])),
        h("td", {class: "num"}, fmtRate(windowRate(code))), h("td", {class: "num"}, fmtRate(pts.length ? pts[pts.length - 1][1] : undefined)));
    })));
  const lines = codes.slice(0, CODE_COLORS.length).map((code, i) => ({label: code, color: CODE_COLORS[i], points: series(codeRate(code))}));
  return [h("div", {class: "grid"}, chart("Refused frames per second, by code", lines, fmtRate), h("div", {class: "span2"}, table))];
}

// refusalTable lists the counters of refusals and errors, by their labels
// (refused produce frames have their own table, by code).
function refusalTable(samples) {
  const rows = samples.filter(s => s.name !== REFUSED && /_total$/.test(s.name) && /refus|error|fail|denied|fenced|conflict/.test(s.name) && s.value > 0);
  if (!rows.length) return [h("p", {class: "muted"}, "No refusals or errors counted since the node started.")];
  return [h("table", {}, h("caption", {}, "Refusals and errors since the node started"),
    h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Counter"), h("th", {scope: "col"}, "Labels"), h("th", {scope: "col", class: "num"}, "Count"))),
    h("tbody", {}, rows.map(s => h("tr", {}, h("td", {}, s.name), h("td", {}, Object.entries(s.labels).map(([k, v]) => `${k}=${v}`).join(" ")),
      h("td", {class: "num"}, fmtInt(s.value))))))];
}

// ---------- Messages ----------

const QUERY_FIELDS = [
  ["offset", "From offset", "number"], ["topic", "Topic", "text"], ["key", "Key", "text"],
  ["partition", "Partition", "number"], ["producer", "Producer id", "number"],
  ["from", "From time", "datetime-local"], ["to", "To time", "datetime-local"], ["limit", "Page size", "number"],
];

function messagesPage(main, params) {
  main.append(h("h1", {}, "Messages"));
  const form = h("form", {class: "query", role: "search", "aria-label": "Find messages"},
    QUERY_FIELDS.map(([name, label, type]) => h("label", {}, label,
      h("input", {name, type, id: "q-" + name, min: type === "number" ? 0 : undefined, value: params.get(name) || (name === "limit" ? "50" : "")}))),
    h("button", {type: "submit", id: "q-search"}, "Search"));
  // Older and Last step by offsets. Without a filter a page of N offsets
  // is a page of messages (less its holes); with one it can hold any
  // number of matches, so they say they jump by offsets.
  const filtered = FILTERS.some(k => params.get(k));
  const n = limitOf({limit: params.get("limit")});
  const jumpNote = filtered ? `Steps by ${n} offsets, not by ${n} matches: the filter can match any number of them` : null;
  const nav = h("div", {class: "buttons"},
    h("button", {type: "button", id: "q-first"}, "First"),
    h("button", {type: "button", id: "q-older", title: jumpNote}, filtered ? `Jump back ${fmtInt(n)} offsets` : "Older"),
    h("button", {type: "button", id: "q-newer"}, "Newer"),
    h("button", {type: "button", id: "q-last", title: jumpNote}, filtered ? `Jump to C−${fmtInt(n)}` : "Last"),
    h("span", {class: "muted", id: "q-summary", "aria-live": "polite"}));
  const results = h("div", {id: "results"});
  main.append(form, nav, results);
  let page = null;
  const values = () => Object.fromEntries(QUERY_FIELDS.map(([n]) => [n, form.elements[n].value.trim()]));
  const go = (changes) => {
    const v = Object.assign(values(), changes);
    const q = new URLSearchParams();
    for (const [k, val] of Object.entries(v)) if (val !== "" && !(k === "limit" && val === "50")) q.set(k, val);
    navigate("/ui/messages" + (q.toString() ? "?" + q : ""));
  };
  form.addEventListener("submit", e => { e.preventDefault(); go({}); });
  nav.querySelector("#q-first").addEventListener("click", () => guarded(async () => {
    const st = await api("/v1/status"); go({offset: String(st.log_start || 0)});
  }));
  nav.querySelector("#q-last").addEventListener("click", () => guarded(async () => {
    const st = await api("/v1/status"); go({offset: String(Math.max(0, (st.committed || 0) - limitOf(values())))});
  }));
  nav.querySelector("#q-older").addEventListener("click", () => go({offset: String(Math.max(0, (Number(values().offset) || 0) - limitOf(values())))}));
  nav.querySelector("#q-newer").addEventListener("click", () => { if (page) go({offset: String(page.next_offset)}); });
  guarded(async () => {
    const v = values();
    try {
      page = await api("/v1/messages?" + readQuery(v));
    } catch (e) {
      if (e.status === 403 && v.producer && !v.topic) {
        e.message += " (a producer's messages in every topic need read on every topic: enter a topic and search again)";
      }
      throw e;
    }
    renderPage(results, page, v, params.has("offset") ? Number(params.get("offset")) : null);
  });
}

// FILTERS are the query fields that select messages within the offsets.
const FILTERS = ["topic", "key", "partition", "producer", "from", "to"];

function limitOf(v) { return Number(v.limit) > 0 ? Number(v.limit) : 50; }

function readQuery(v) {
  const q = new URLSearchParams();
  q.set("offset", v.offset || "0");
  q.set("limit", String(limitOf(v)));
  for (const k of ["topic", "key", "partition", "producer"]) if (v[k]) q.set(k, v[k]);
  if (v.from) q.set("from_time_us", String(Date.parse(v.from) * 1000));
  if (v.to) q.set("to_time_us", String(Date.parse(v.to) * 1000));
  return q.toString();
}

// producerLink lists a producer's messages in topic: a principal who may
// not read every topic needs one named.
function producerLink(id, topic) {
  const q = new URLSearchParams({producer: String(id)});
  if (topic) q.set("topic", topic);
  return "/ui/messages?" + q;
}

function permalink(offset, v) {
  const q = new URLSearchParams({offset: String(offset)});
  if (v.topic) q.set("topic", v.topic);
  if (v.key) q.set("key", v.key);
  return "/ui/messages?" + q;
}

// rows merges a page's messages and skipped ranges in offset order.
function rows(page) {
  const out = page.messages.map(m => ({offset: m.offset, message: m}));
  for (const s of page.skipped || []) out.push({offset: s.first, skipped: s});
  return out.sort((a, b) => a.offset - b.offset);
}

function renderPage(into, page, v, selected) {
  const summary = document.getElementById("q-summary");
  summary.textContent = `${page.messages.length} message${page.messages.length === 1 ? "" : "s"} from offset ${fmtInt(Number(v.offset) || 0)}; next ${fmtInt(page.next_offset)}; C = ${fmtInt(page.committed)}`;
  const body = h("tbody", {});
  for (const r of rows(page)) {
    if (r.skipped) { body.append(skippedRow(r.skipped, selected)); continue; }
    const m = r.message;
    const cell = h("td", {colspan: 7}); // the detail is built on its first opening: a page of hex dumps is work nobody asked for
    const detail = h("tr", {class: "detail", hidden: true}, cell);
    const toggle = h("button", {type: "button", "aria-expanded": "false", "aria-label": "Details of offset " + m.offset}, "Details");
    const show = open => {
      if (open && !cell.firstChild) cell.append(messageDetail(m));
      toggle.setAttribute("aria-expanded", String(open));
      detail.hidden = !open;
    };
    toggle.addEventListener("click", () => show(toggle.getAttribute("aria-expanded") !== "true"));
    const row = h("tr", {id: "m-" + m.offset, class: m.offset === selected ? "selected" : null},
      h("td", {class: "num"}, h("a", {href: permalink(m.offset, v)}, String(m.offset))),
      h("td", {}, m.topic), h("td", {}, m.key !== undefined ? m.key : (m.key_base64 ? "base64:" + m.key_base64 : "")),
      h("td", {class: "preview"}, payloadPreview(m)), h("td", {class: "num"}, String((m.headers || []).length)),
      h("td", {}, m.ingest_time), h("td", {}, toggle));
    body.append(row, detail);
    if (m.offset === selected) show(true);
  }
  if (!body.children.length) body.append(h("tr", {}, h("td", {colspan: 7, class: "muted"}, "No messages here below C.")));
  into.replaceChildren(h("table", {id: "messages"},
    h("caption", {}, "Messages and holes in offset order"),
    h("thead", {}, h("tr", {}, ["Offset", "Topic", "Key", "Payload", "Headers", "Ingest time", ""].map(t => h("th", {scope: "col"}, t)))),
    body));
  const target = selected !== null && document.getElementById("m-" + selected);
  if (target) target.scrollIntoView({block: "center"});
}

function skippedRow(s, selected) {
  const what = s.reason === "compacted" ? "compacted" : "hole";
  const inside = selected !== null && selected >= s.first && selected < s.end;
  return h("tr", {class: "hole" + (inside ? " selected" : ""), "data-first": s.first, "data-end": s.end},
    h("td", {class: "num"}, String(s.first)),
    h("td", {colspan: 6}, `${what}: offsets ${fmtInt(s.first)} to ${fmtInt(s.end - 1)} (${fmtInt(s.end - s.first)} offsets` +
      (what === "hole" ? ", reserved by a sequencer that died, never a message)" : ", removed below the log start)")));
}

// payloadPreview is the start of a payload as one line of text: JSON as
// JSON, text as text, other bytes as hex. Only the first bytes are decoded.
function payloadPreview(m) {
  if (m.payload !== undefined) {
    const text = JSON.stringify(m.payload);
    return text.length > 200 ? text.slice(0, 200) + "…" : text;
  }
  if (m.payload_base64 === undefined) return "";
  const more = m.payload_base64.length > 64;
  const head = b64bytes(m.payload_base64.slice(0, 64)); // 48 bytes: a whole number of base64 quanta
  const text = utf8Text(head, more);
  return (text !== null ? text : "bytes: " + hex(head)) + (more ? "…" : "");
}

function b64bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// utf8Text is bytes as text, or null if they are not printable UTF-8;
// cut says the bytes may end inside a character.
function utf8Text(bytes, cut) {
  try {
    const text = new TextDecoder("utf-8", {fatal: true}).decode(bytes, {stream: !!cut});
    return /[\x00-\x08\x0e-\x1f\x7f]/.test(text) ? null : text;
  } catch (_) { return null; }
}

function hex(bytes) { return Array.from(bytes, b => b.toString(16).padStart(2, "0")).join(" "); }

// hexDump renders bytes 16 to a line, with offsets and printable ASCII.
function hexDump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const chunk = bytes.slice(i, i + 16);
    const ascii = Array.from(chunk, b => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(i.toString(16).padStart(8, "0") + "  " + hex(chunk).padEnd(47) + "  " + ascii);
  }
  return lines.join("\n");
}

function messageDetail(m) {
  const parts = [kv([
    ["Offset", String(m.offset)],
    ["Topic", m.topic],
    ["Key", m.key !== undefined ? m.key : (m.key_base64 ? "base64 " + m.key_base64 : "(none)")],
    ["Producer id", m.producer_id ? h("a", {href: producerLink(m.producer_id, m.topic), title: "This producer's messages in " + m.topic},
      String(m.producer_id)) : "(none: no producer session)"],
    ["Producer seq", m.producer_seq !== undefined ? String(m.producer_seq) : "–"],
    ["Message id", m.message_id || (m.message_id_base64 ? "base64 " + m.message_id_base64 : "–")],
    ["Client time", m.client_time_us ? new Date(m.client_time_us / 1000).toISOString() : "–"],
    ["Ingest time", m.ingest_time],
    ["Permalink", h("a", {href: permalink(m.offset, {})}, "/ui/messages?offset=" + m.offset)],
  ])];
  const headers = m.headers || [];
  parts.push(h("h2", {}, "Headers"));
  parts.push(headers.length ? h("table", {class: "headers"},
    h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Header"), h("th", {scope: "col"}, "Value"))),
    h("tbody", {}, headers.map(hd => h("tr", {}, h("td", {}, hd.key),
      h("td", {}, hd.value !== undefined ? hd.value : (hd.value_base64 !== undefined ? "base64 " + hd.value_base64 : "")))))) :
    h("p", {class: "muted"}, "No headers."));
  parts.push(h("h2", {}, "Payload"));
  if (m.payload !== undefined) {
    parts.push(h("p", {class: "muted"}, "JSON"), h("pre", {class: "payload json"}, JSON.stringify(m.payload, null, 2)));
  } else if (m.payload_base64 !== undefined) {
    const bytes = b64bytes(m.payload_base64);
    const text = utf8Text(bytes);
    if (text !== null) parts.push(h("p", {class: "muted"}, "Text"), h("pre", {class: "payload text"}, text));
    parts.push(h("p", {class: "muted"}, `Bytes (${bytes.length}), hex`), h("pre", {class: "payload hex"}, hexDump(bytes)),
      h("p", {class: "muted"}, "Base64"), h("pre", {class: "payload base64"}, m.payload_base64));
  }
  return h("div", {class: "message"}, parts);
}

// ---------- Tail ----------

// The tail reads one page of TAIL_PAGE messages per TAIL_POLL_MS (at most
// 100 messages/s shown: more than anyone reads) and keeps TAIL_ROWS rows.
const TAIL_PAGE = 50;
const TAIL_ROWS = 100;
const TAIL_POLL_MS = 500;

function tailPage(main, params) {
  main.append(h("h1", {}, "Live tail"));
  const followed = params.get("topic") || ""; // the URL's topic: editing the field changes nothing until Follow
  const topic = h("input", {id: "t-topic", name: "topic", value: followed, placeholder: "every topic"});
  const pause = h("button", {type: "button", id: "t-pause", "aria-pressed": "false"}, "Pause");
  const status = h("p", {id: "t-status", class: "muted", "aria-live": "off"}, "Starting…");
  const body = h("tbody", {id: "t-rows"});
  const form = h("form", {class: "query", "aria-label": "Tail options"}, h("label", {}, "Topic", topic), h("button", {type: "submit"}, "Follow"));
  main.append(form, h("div", {class: "buttons"}, pause, h("button", {type: "button", id: "t-clear", onclick: () => body.replaceChildren()}, "Clear")), status,
    h("table", {id: "tail", class: "fixed"}, h("caption", {}, "Newest first"),
      h("thead", {}, h("tr", {}, ["Offset", "Topic", "Key", "Payload", "Ingest time"].map(t => h("th", {scope: "col"}, t)))), body));
  form.addEventListener("submit", e => { e.preventDefault(); navigate("/ui/tail" + (topic.value.trim() ? "?topic=" + encodeURIComponent(topic.value.trim()) : "")); });
  const state = {next: params.has("offset") ? Number(params.get("offset")) : null, last: 0, full: false, paused: false, shown: [], committed: []};
  pause.addEventListener("click", () => {
    state.paused = !state.paused;
    pause.setAttribute("aria-pressed", String(state.paused));
    pause.textContent = state.paused ? "Resume" : "Pause";
  });
  let stopped = false, timer = 0;
  const previous = cleanup;
  cleanup = () => { stopped = true; clearTimeout(timer); previous(); };
  const tick = async () => {
    let again = TAIL_POLL_MS;
    await shown(); // a hidden tab reads nothing; the next page says what it skipped
    if (stopped) return;
    if (!state.paused) {
      try { await tailStep(state, followed, body, status); showError(null); } catch (e) { showError(e); again = 2000; }
    }
    if (!stopped) timer = setTimeout(tick, again);
  };
  tick();
}

// tailStep reads one page of at most TAIL_PAGE messages; the tail reads
// one page per TAIL_POLL_MS whatever the rate. When the last page came
// full and more than a page of offsets is still unread below C, more
// arrived than a page holds: it skips to the newest page and says so. The
// console shows the latest messages, it does not read the whole log (that
// is a consumer's load, and the produce path would pay for it). A page
// that was not full read every match up to its next_offset, so a topic's
// tail never skips its messages because other topics' offsets came.
async function tailStep(state, topic, body, status) {
  if (state.next === null) state.next = state.last = (await api("/v1/status")).committed || 0;
  if (state.full && state.last - state.next > TAIL_PAGE) {
    const jumpTo = state.last - TAIL_PAGE;
    body.prepend(h("tr", {class: "hole"}, h("td", {class: "num"}, String(state.next)),
      h("td", {colspan: 4}, `skipped offsets ${fmtInt(state.next)} to ${fmtInt(jumpTo - 1)}: more came than the tail shows (`,
        h("a", {href: permalink(state.next, {topic})}, "read them"), ")")));
    state.next = jumpTo;
  }
  const q = new URLSearchParams({offset: String(state.next), limit: String(TAIL_PAGE)});
  if (topic) q.set("topic", topic);
  const page = await api("/v1/messages?" + q);
  const now = Date.now() / 1000;
  for (const r of rows(page)) body.prepend(r.skipped ? skippedRow(r.skipped, null) : tailRow(r.message, topic));
  while (body.children.length > TAIL_ROWS) body.lastChild.remove();
  state.shown.push([now, page.messages.length]);
  state.committed.push([now, page.committed]);
  state.next = page.next_offset;
  state.last = page.committed;
  state.full = page.messages.length >= TAIL_PAGE;
  const window = 10;
  state.shown = state.shown.filter(([t]) => now - t <= window);
  state.committed = state.committed.filter(([t]) => now - t <= window);
  const span = state.committed.length > 1 ? now - state.committed[0][0] : 0;
  const shownRate = span > 0 ? state.shown.slice(1).reduce((s, [, n]) => s + n, 0) / span : 0;
  const cRate = span > 0 ? (state.committed[state.committed.length - 1][1] - state.committed[0][1]) / span : 0;
  status.textContent = `Following ${topic ? "topic " + topic : "the whole log"} at offset ${fmtInt(state.next)} · ` +
    `${fmtRate(shownRate)} messages/s shown · C advancing ${fmtRate(cRate)} offsets/s`;
}

function tailRow(m, topic) {
  return h("tr", {"data-offset": m.offset},
    h("td", {class: "num"}, h("a", {href: permalink(m.offset, {topic})}, String(m.offset))),
    h("td", {}, m.topic), h("td", {}, m.key !== undefined ? m.key : ""), h("td", {class: "preview"}, payloadPreview(m)),
    h("td", {}, m.ingest_time));
}

// ---------- Topics ----------

function topicsPage(main, params) {
  main.append(h("h1", {}, "Topics"));
  const list = h("div", {id: "topics"});
  const detail = h("div", {id: "topic-detail"});
  main.append(list, detail, createTopicForm());
  guarded(async () => {
    const {topics} = await api("/v1/console/topics");
    if (!topics.length) { list.replaceChildren(h("p", {class: "muted"}, "No topics you may read yet.")); return; }
    list.replaceChildren(h("table", {},
      h("caption", {}, "Topics you may read"),
      h("thead", {}, h("tr", {}, ["Topic", "Partitions", "Cleanup", "Retention", "Retention bytes", "Schema", ""].map(t => h("th", {scope: "col"}, t)))),
      h("tbody", {}, topics.map(t => h("tr", {},
        h("td", {}, h("a", {href: "/ui/topics?topic=" + encodeURIComponent(t.name)}, t.name)),
        h("td", {class: "num"}, String(t.partitions)), h("td", {}, t.cleanup_policy),
        h("td", {}, fmtDuration(t.retention_ms)), h("td", {}, t.retention_bytes ? fmtBytes(t.retention_bytes) : "none of its own"),
        h("td", {}, t.schema_format ? `${t.schema_format} v${t.schema_version} (id ${t.schema_id})` : "none"),
        h("td", {}, h("a", {href: "/ui/messages?topic=" + encodeURIComponent(t.name)}, "Messages"), " ",
          h("a", {href: "/ui/tail?topic=" + encodeURIComponent(t.name)}, "Tail")))))));
    if (params.get("topic")) await topicDetail(detail, params.get("topic"));
  });
}

async function topicDetail(into, name) {
  const p = await api("/v1/topics/" + encodeURIComponent(name) + "/partitions");
  into.replaceChildren(h("h2", {}, "Partitions of " + p.topic),
    kv([["Log start", fmtInt(p.log_start)], ["Committed watermark C", fmtInt(p.committed)]]),
    h("table", {}, h("caption", {}, "Each partition's reads end at C: a partition is a sub-sequence of the one log"),
      h("thead", {}, h("tr", {}, h("th", {scope: "col"}, "Partition"), h("th", {scope: "col"}, "End offset"), h("th", {scope: "col"}, ""))),
      h("tbody", {}, p.partitions.map(x => h("tr", {}, h("td", {class: "num"}, String(x.partition)), h("td", {class: "num"}, fmtInt(x.end_offset)),
        h("td", {}, h("a", {href: `/ui/messages?topic=${encodeURIComponent(p.topic)}&partition=${x.partition}`}, "Messages")))))));
}

function createTopicForm() {
  const out = h("p", {id: "create-result", "aria-live": "polite"});
  const form = h("form", {class: "query", id: "create-topic"},
    h("label", {}, "Name", h("input", {name: "name", required: true, id: "c-name"})),
    h("label", {}, "Partitions", h("input", {name: "partitions", type: "number", min: 1, placeholder: "16"})),
    h("label", {}, "Cleanup", h("select", {name: "cleanup_policy"}, h("option", {value: ""}, "delete"), h("option", {value: "compact"}, "compact"))),
    h("label", {}, "Retention (ms, -1 forever)", h("input", {name: "retention_ms", type: "number", min: -1})),
    h("button", {type: "submit"}, "Create"));
  form.addEventListener("submit", e => {
    e.preventDefault();
    guarded(async () => {
      const body = {name: form.elements.name.value.trim()};
      if (form.elements.partitions.value) body.partitions = Number(form.elements.partitions.value);
      if (form.elements.cleanup_policy.value) body.cleanup_policy = form.elements.cleanup_policy.value;
      if (form.elements.retention_ms.value) body.retention_ms = Number(form.elements.retention_ms.value);
      const t = await api("/v1/topics", {method: "POST", json: body});
      out.textContent = `Created ${t.name} with ${t.partitions} partitions.`;
      navigate("/ui/topics?topic=" + encodeURIComponent(t.name));
    });
  });
  return h("details", {}, h("summary", {}, "Create a topic (needs the admin ACL on its name)"), form, out);
}

// ---------- Consumer groups ----------

function consumersPage(main, params) {
  main.append(h("h1", {}, "Consumer groups"));
  const group = params.get("group") || "";
  const input = h("input", {id: "g-name", name: "group", value: group, required: true});
  const form = h("form", {class: "query", role: "search", "aria-label": "Describe a group"},
    h("label", {}, "Group", input), h("button", {type: "submit"}, "Describe"));
  form.addEventListener("submit", e => { e.preventDefault(); navigate("/ui/consumers?group=" + encodeURIComponent(input.value.trim())); });
  const out = h("div", {id: "group"});
  main.append(form, out);
  if (!group) {
    const after = params.get("after") || "";
    every(ETCD_POLL_MS, async () => replaceKeepingFocus(out,
      groupList(await api("/v1/console/groups" + (after ? "?after=" + encodeURIComponent(after) : "")), after)));
    return;
  }
  out.before(h("p", {}, h("a", {href: "/ui/consumers"}, "All groups")));
  every(POLL_MS, async () => replaceKeepingFocus(out, groupView(await api("/v1/consumers/" + encodeURIComponent(group)))));
}

// The lists of groups and producers read etcd (a page of 100 groups'
// keys, a page of producer records): every 5 s, not 2.
const ETCD_POLL_MS = 5000;

function groupList(d, after) {
  if (d.unavailable) return [h("p", {class: "muted"}, d.unavailable + ".")];
  const pager = h("div", {class: "buttons"},
    after ? h("a", {href: "/ui/consumers", class: "button"}, "First page") : null,
    d.next_after ? h("a", {href: "/ui/consumers?after=" + encodeURIComponent(d.next_after), class: "button", id: "g-more"}, "More groups") : null);
  const undecodable = d.undecodable ? h("p", {class: "note", id: "g-undecodable"},
    `${fmtInt(d.undecodable)} group${d.undecodable === 1 ? "" : "s"} of this page left out: ${d.undecodable === 1 ? "its" : "their"} keys in etcd do not decode.`) : null;
  if (!d.groups.length) {
    return [h("p", {class: "muted"}, "No consumer group whose topics you may read" + (after ? ` after ${after} in this page of groups.` : " yet.")), undecodable, pager];
  }
  return [h("table", {id: "g-list"},
    h("caption", {}, "Groups whose topics you may read" + (after ? `, after ${after}` : "") + ", by name; lag is measured against C, refreshed every 5 s"),
    h("thead", {}, h("tr", {}, ["Group", "Generation", "Members", "Topics", "Partitions", "Total lag"].map(t => h("th", {scope: "col"}, t)))),
    h("tbody", {}, d.groups.map(g => h("tr", {"data-group": g.group},
      h("td", {}, h("a", {href: "/ui/consumers?group=" + encodeURIComponent(g.group)}, g.group)),
      h("td", {class: "num"}, fmtInt(g.generation)), h("td", {class: "num"}, fmtInt(g.members)), h("td", {}, g.topics.join(", ")),
      h("td", {class: "num"}, fmtInt(g.partitions)), h("td", {class: "num lag"}, fmtInt(g.total_lag)))))), undecodable, pager];
}

function groupView(d) {
  const totalLag = d.partitions.reduce((s, p) => s + p.lag, 0);
  return [
    kv([["Group", d.group], ["Generation", fmtInt(d.generation)], ["Committed watermark C", fmtInt(d.committed)],
      ["Members", fmtInt(d.members.length)], ["Total lag", h("span", {class: "lag", id: "g-lag"}, fmtInt(totalLag))]]),
    h("table", {id: "g-members"}, h("caption", {}, "Members and their partitions"),
      h("thead", {}, h("tr", {}, ["Member", "Client", "Node", "Topics", "Partitions"].map(t => h("th", {scope: "col"}, t)))),
      h("tbody", {}, d.members.length ? d.members.map(m => h("tr", {}, h("td", {}, m.member_id), h("td", {}, m.client_name), h("td", {}, m.node),
        h("td", {}, m.topics.join(", ")), h("td", {}, m.partitions.map(p => `${p.topic}/${p.partition}`).join(", ")))) :
        h("tr", {}, h("td", {colspan: 5, class: "muted"}, "No members now.")))),
    h("table", {id: "g-partitions"}, h("caption", {}, "Committed offsets and lag against C, per partition"),
      h("thead", {}, h("tr", {}, ["Topic", "Partition", "Committed", "End offset", "Lag", "Member"].map(t => h("th", {scope: "col"}, t)))),
      h("tbody", {}, d.partitions.map(p => h("tr", {"data-partition": `${p.topic}/${p.partition}`},
        h("td", {}, p.topic), h("td", {class: "num"}, String(p.partition)),
        h("td", {class: "num"}, p.committed !== undefined ? fmtInt(p.committed) : "none yet"),
        h("td", {class: "num"}, fmtInt(p.end_offset)), h("td", {class: "num lag"}, fmtInt(p.lag)), h("td", {}, p.member_id || "–"))))),
  ];
}

// ---------- Producers ----------

function producersPage(main, params) {
  main.append(h("h1", {}, "Producers"),
    h("p", {class: "note", id: "p-source"}, "Id, name, epoch, owner and principal come from each producer's record in etcd, " +
      "which changes only at InitProducer and when a node takes a producer over: the owner shown can be a node that has just died, " +
      "until the next InitProducer or takeover moves the producer. The last durable seq is not in etcd: it is read from the memory " +
      "of this node, for the producers this node owns, and is shown as \u201cnot here\u201d for the others."));
  const after = params.get("after") || "";
  const out = h("div", {id: "producers"});
  main.append(out);
  every(ETCD_POLL_MS, async () => {
    const d = await api("/v1/console/producers" + (after ? "?after=" + encodeURIComponent(after) : ""));
    replaceKeepingFocus(out, producerList(d, after));
  });
}

function producerList(d, after) {
  const scope = d.all_principals ? "Every producer" : "The producers bound to you (only an administrator sees every principal\u2019s)";
  const pager = h("div", {class: "buttons"},
    after ? h("a", {href: "/ui/producers", class: "button"}, "First page") : null,
    d.next_after ? h("a", {href: "/ui/producers?after=" + d.next_after, class: "button", id: "p-more"}, "More producers") : null);
  if (!d.producers.length) return [h("p", {class: "muted"}, scope + (after ? `: none with an id above ${after} in this page of records.` : ": none yet.")), pager];
  return [h("table", {id: "p-list"},
    h("caption", {}, scope + (after ? `, ids above ${after}` : "") + ", in id order"),
    h("thead", {}, h("tr", {}, ["Id", "Name", "Epoch", "Last durable seq", "Owner", "Owner node", "Principal", "State"].map(t => h("th", {scope: "col"}, t)))),
    h("tbody", {}, d.producers.map(p => h("tr", {"data-producer": p.name},
      h("td", {class: "num"}, h("a", {href: "/ui/messages?producer=" + p.id}, String(p.id))),
      h("td", {}, p.name, p.idempotency_bucket ? h("span", {class: "muted"}, " (Idempotency-Key bucket)") : null),
      h("td", {class: "num epoch"}, fmtInt(p.epoch)),
      h("td", {class: "num seq"}, p.last_durable_seq !== undefined ? fmtInt(p.last_durable_seq) : (p.owned_here ? "none yet" : "not here")),
      h("td", {}, p.owner), h("td", {}, p.owner_live ? (p.owner_address || "live") + (p.owned_here ? " (this node)" : "") : h("span", {class: "bad"}, "gone")),
      h("td", {}, p.principal || h("span", {class: "muted"}, "none")),
      h("td", {}, p.expired ? "expired (its next InitProducer starts it over)" : "active"))))), pager];
}

// ---------- Archive ----------

function archivePage(main, params) {
  main.append(h("h1", {}, "Archive"));
  const before = params.get("before") || "";
  const out = h("div", {id: "archive"});
  main.append(out);
  every(POLL_MS, async () => {
    const [d, st] = await Promise.all([api("/v1/console/archive" + (before ? "?before=" + encodeURIComponent(before) : "")),
      api("/v1/status").catch(() => ({}))]);
    replaceKeepingFocus(out, archiveView(d, st, before));
  });
}

// holesText lists a file's holes, the first few of them when it has many.
function holesText(holes) {
  if (!holes.length) return "none";
  const shown = holes.slice(0, 5).map(x => `${fmtInt(x.first)} to ${fmtInt(x.end - 1)}`).join(", ");
  const offsets = holes.reduce((n, x) => n + x.end - x.first, 0);
  return shown + (holes.length > 5 ? ` and ${fmtInt(holes.length - 5)} more` : "") + (holes.length > 1 ? ` (${fmtInt(offsets)} offsets)` : "");
}

function archiveView(d, st, before) {
  if (!d.enabled) return [h("p", {class: "note", id: "a-off"}, "The archive is off on this node: " + d.reason + ".")];
  const parts = [kv([
    ["Location", d.location],
    ["Archived watermark T", fmtInt(d.t), "a-t"],
    ["First archived offset", fmtInt(d.first)],
    ["Not yet archived", st.committed !== undefined ? fmtInt(Math.max(0, st.committed - d.t)) + " offsets below C" : "–"],
    ["Files", fmtInt(d.files_total)], ["Rows", fmtInt(d.rows_total)], ["Bytes", fmtBytes(d.bytes_total)],
    d.loaded < d.t ? ["Manifest loaded to", fmtInt(d.loaded) + " (still loading the newest segments)"] : null,
  ])];
  if (!d.files.length) {
    parts.push(h("p", {class: "muted"}, d.known ? "No file archived yet." : "This node has not read the archive's head yet."));
    return parts;
  }
  parts.push(h("table", {id: "a-files"},
    h("caption", {}, "Files newest first" + (before ? `, ending at or below offset ${fmtInt(before)}` : "") + "; a hole is a range of offsets without a message"),
    h("thead", {}, h("tr", {}, ["Offsets", "Rows", "Bytes", "Holes", "Ingest times", "Object"].map(t => h("th", {scope: "col"}, t)))),
    h("tbody", {}, d.files.map(f => h("tr", {"data-first": f.first},
      h("td", {class: "nowrap"}, h("a", {href: "/ui/messages?offset=" + f.first}, `${fmtInt(f.first)} to ${fmtInt(f.end - 1)}`)),
      h("td", {class: "num"}, fmtInt(f.rows)), h("td", {class: "num nowrap"}, fmtBytes(f.bytes)),
      h("td", {class: "holes"}, holesText(f.holes)),
      h("td", {}, f.first_ingest_time ? f.first_ingest_time + " to " + f.last_ingest_time : "–"),
      h("td", {class: "object"}, f.object))))));
  parts.push(h("div", {class: "buttons"},
    before ? h("a", {href: "/ui/archive", class: "button"}, "Newest files") : null,
    d.next_before ? h("a", {href: "/ui/archive?before=" + d.next_before, class: "button", id: "a-older"}, "Older files") : null));
  return parts;
}

// ---------- start ----------

// The pages that read /v1/status, /v1/messages or /v1/topics: on a node
// without them they say where to go instead.
const NEEDS_API = new Set([overviewPage, messagesPage, tailPage]);

setupToken();
showSession().then(render); // the session says whether this node serves the API
