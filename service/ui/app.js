// The deltasieve dashboard: a client of the service's REST API, nothing else. No build step,
// no library: tables are DOM, plots are inline SVG drawn here.
"use strict";

// The API lives next to the page: /ui behind a proxy prefix keeps the prefix.
const BASE = location.pathname.replace(/\/ui\/?$/, "");
// Seconds between refreshes: quicker while a sync is queued or running, to show its progress.
const IDLE_REFRESH_S = 3;
const BUSY_REFRESH_S = 1.5;
// Syncs shown in the plots and the table of a view (newest ones).
const MAX_SYNCS = 40;
const ACTIVE = new Set(["queued", "running"]);
const SVG_NS = "http://www.w3.org/2000/svg";

const state = {
  selected: decodeURIComponent((location.hash.match(/^#view=(.+)$/) || [])[1] || ""),
  views: [],
  syncs: {}, // view name -> sync records, newest first
  statsFor: {}, // view name -> id of the sync the shown statistics are of
  stats: {},
  apiKey: sessionStorage.getItem("deltasieve-api-key"),
  pendingSync: null, // a view whose sync waits for the API key
  timer: null,
  lastFull: 0, // when the page last read everything (Date.now())
  sources: [],
};

// ---------------------------------------------------------------- small helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function bytes(n) {
  if (n === null || n === undefined || !isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? Math.round(n) : n.toFixed(n < 10 ? 2 : 1)} ${units[i]}`;
}

// Axis ticks of a log scale fall on powers of ten: 1 kB, 10 kB, … read better than KiB there.
function decimalBytes(n) {
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${Math.round(n * 100) / 100} ${units[i]}`;
}

function count(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en");
}

function seconds(s) {
  if (s === null || s === undefined) return "–";
  return s < 10 ? s.toFixed(2) : s < 100 ? s.toFixed(1) : Math.round(s).toString();
}

function when(iso) {
  if (!iso) return "–";
  const t = new Date(iso);
  const pad = (x) => String(x).padStart(2, "0");
  return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())} ${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}`;
}

function ago(iso) {
  if (!iso) return "";
  const s = (Date.now() - new Date(iso).getTime()) / 1000;
  if (s < 60) return `${Math.max(0, Math.round(s))} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

function badge(status, text) {
  return el("span", { class: `badge ${status}`, "data-status": status }, text ?? status);
}

// The API key the person gave, on every call (the service may need one even to read).
function keyHeaders(extra) {
  return state.apiKey ? { ...extra, "X-API-Key": state.apiKey } : { ...extra };
}

// A 401 asks for a key: the form shows, and the page reads again once one is given.
function askForKey(why) {
  document.getElementById("key-form").hidden = false;
  document.getElementById("key-why").textContent = why;
  document.getElementById("action-message").textContent = state.apiKey ? "that API key was refused" : "";
}

async function getJson(path) {
  const r = await fetch(BASE + path, { headers: keyHeaders({ Accept: "application/json" }) });
  if (r.status === 401) askForKey("This service needs an API key to show its views:");
  if (!r.ok) throw new Error(`GET ${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

// ---------------------------------------------------------------- what a sync record says

// How a sync ran: the view's strategy, what auto chose per site, or the load.
function ranAs(sync, isLoad) {
  const m = sync.metrics || {};
  if (isLoad) return "load";
  const sites = m.sites || [];
  const chosen = m.chosen || [...new Set(sites.map((s) => s.chosen).filter(Boolean))].join("+");
  if (m.strategy && chosen && chosen !== m.strategy) return `${m.strategy} → ${chosen}`;
  return m.strategy || chosen || "–";
}

function movedBytes(m) {
  if (m.bytes_to_agent === undefined && m.bytes_from_agent === undefined) return null;
  return (m.bytes_to_agent || 0) + (m.bytes_from_agent || 0);
}

// Shipping the whole site queries, as the sync's metrics estimate it (Φ_t × rows scanned);
// null where the cost model was only assumed (a view's first sync), so the number is no measure.
function fullShipBytes(m) {
  const sites = m.sites && m.sites.length ? m.sites : [m];
  if (sites.some((s) => !s.cost_model || s.cost_model.measured_on === "assumed")) return null;
  if (typeof m.full_ship_estimate_bytes === "number") return m.full_ship_estimate_bytes;
  const per = sites.map((s) => s.full_ship_estimate_bytes);
  return per.every((x) => typeof x === "number") ? per.reduce((a, b) => a + b, 0) : null;
}

// A lower bound on the bytes any method must move: the changed rows whole (Φ_t each) and the
// deleted keys (Φ_k each), with the sync's own cost model. An estimate: the metrics hold no
// measured lower bound.
function lowerBoundBytes(m) {
  const sites = m.sites && m.sites.length ? m.sites : null;
  const part = (cm, ins, upd, del) => (ins + upd) * cm.tuple_bytes + del * cm.key_bytes;
  if (sites) {
    let total = 0;
    for (const s of sites) {
      const cm = s.cost_model;
      if (!cm || cm.measured_on === "assumed" || s.fragment_inserted === undefined) return null;
      total += part(cm, s.fragment_inserted || 0, s.fragment_updated || 0, s.fragment_deleted || 0);
    }
    return total;
  }
  const cm = m.cost_model;
  if (!cm || cm.measured_on === "assumed" || m.rows_inserted === undefined) return null;
  return part(cm, m.rows_inserted || 0, m.rows_updated || 0, m.rows_deleted || 0);
}

// ---------------------------------------------------------------- plots (inline SVG)

const PLOT = { w: 520, h: 240, left: 64, right: 12, top: 14, bottom: 34 };

function niceTicks(lo, hi, n = 5) {
  if (hi <= lo) hi = lo + 1;
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw);
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) ticks.push(v);
  return ticks;
}

// One plot: x is the sync's place (oldest left), y linear or log; series are lines with
// points, or bars (stacked when several bar series are given).
function drawPlot(figure, spec) {
  figure.replaceChildren();
  figure.append(el("figcaption", {}, spec.title));
  const { w, h, left, right, top, bottom } = PLOT;
  const root = svg("svg", {
    viewBox: `0 0 ${w} ${h}`,
    width: "100%",
    role: "img",
    "aria-label": spec.title,
    "data-plot": spec.id,
    "data-points": 0,
  });
  figure.append(root);
  const n = spec.labels.length;
  const plotW = w - left - right;
  const plotH = h - top - bottom;
  if (n === 0) {
    root.append(svg("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "empty" }, spec.empty || "no syncs yet"));
    return;
  }
  const bars = spec.series.filter((s) => s.kind === "bar");
  const lines = spec.series.filter((s) => s.kind !== "bar");
  const values = [];
  for (let i = 0; i < n; i++) {
    values.push(bars.reduce((a, s) => a + (s.values[i] || 0), 0));
    for (const s of lines) if (s.values[i] !== null && s.values[i] !== undefined) values.push(s.values[i]);
  }
  const positive = values.filter((v) => v > 0);
  let y;
  let ticks;
  if (spec.log && positive.length) {
    const lo = Math.floor(Math.log10(Math.min(...positive)));
    const hi = Math.max(lo + 1, Math.ceil(Math.log10(Math.max(...positive))));
    y = (v) => top + plotH - ((Math.log10(Math.max(v, Math.pow(10, lo))) - lo) / (hi - lo)) * plotH;
    ticks = [];
    for (let e = lo; e <= hi; e++) ticks.push(Math.pow(10, e));
  } else {
    const hi = Math.max(...values, 0) || 1;
    ticks = niceTicks(0, hi);
    const top_ = ticks[ticks.length - 1];
    y = (v) => top + plotH - (v / top_) * plotH;
  }
  const band = plotW / n;
  const x = (i) => left + band * (i + 0.5);

  const axes = svg("g", { class: "axes" });
  for (const t of ticks) {
    axes.append(svg("line", { x1: left, x2: w - right, y1: y(t), y2: y(t), class: "grid" }));
    axes.append(svg("text", { x: left - 6, y: y(t) + 4, "text-anchor": "end" }, (spec.tickFormat || spec.format)(t)));
  }
  axes.append(svg("line", { x1: left, x2: left, y1: top, y2: top + plotH, class: "axis" }));
  axes.append(svg("line", { x1: left, x2: w - right, y1: top + plotH, y2: top + plotH, class: "axis" }));
  const every = Math.ceil(n / 12);
  for (let i = 0; i < n; i++) {
    if (i % every === 0 || i === n - 1) {
      axes.append(svg("text", { x: x(i), y: top + plotH + 14, "text-anchor": "middle" }, spec.labels[i]));
    }
  }
  axes.append(svg("text", { x: left + plotW / 2, y: h - 4, "text-anchor": "middle", class: "axis-title" }, spec.xTitle || "sync (oldest → newest)"));
  root.append(axes);

  let points = 0;
  const barW = Math.max(2, Math.min(28, band * 0.7));
  const base = new Array(n).fill(0);
  for (const s of bars) {
    const g = svg("g", { class: `series ${s.cls}` });
    for (let i = 0; i < n; i++) {
      const v = s.values[i] || 0;
      if (v <= 0) continue;
      const y0 = spec.log ? y(Math.max(base[i], 1e-300)) : y(base[i]);
      const y1 = y(base[i] + v);
      const rect = svg("rect", { x: x(i) - barW / 2, y: y1, width: barW, height: Math.max(1, y0 - y1), class: "point", "data-value": v });
      rect.append(svg("title", {}, `${spec.labels[i]}: ${s.name} ${spec.format(v)}`));
      g.append(rect);
      base[i] += v;
      points++;
    }
    root.append(g);
  }
  for (const s of lines) {
    const g = svg("g", { class: `series ${s.cls}` });
    let d = "";
    let pen = false;
    for (let i = 0; i < n; i++) {
      const v = s.values[i];
      if (v === null || v === undefined || (spec.log && v <= 0)) { pen = false; continue; }
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
      pen = true;
    }
    if (d) g.append(svg("path", { d, class: "line" }));
    for (let i = 0; i < n; i++) {
      const v = s.values[i];
      if (v === null || v === undefined || (spec.log && v <= 0)) continue;
      const c = svg("circle", { cx: x(i), cy: y(v), r: s.r || 3.5, class: "point", "data-value": v });
      c.append(svg("title", {}, `${spec.labels[i]}: ${s.name} ${spec.format(v)}`));
      g.append(c);
      points++;
    }
    root.append(g);
  }
  root.setAttribute("data-points", points);

  const legend = el("div", { class: "legend" });
  for (const s of spec.series) legend.append(el("span", { class: `key ${s.cls}` }, el("i"), s.name));
  figure.append(legend);
  for (const note of spec.notes || []) figure.append(el("p", { class: "note muted" }, note));
}

function drawHistogram(figure, stats) {
  figure.replaceChildren();
  const title = "Update probability of the view's tuples (ω±)";
  if (!stats) {
    figure.append(el("figcaption", {}, title), el("p", { class: "muted" }, "no statistics: the view has not been loaded yet"));
    return;
  }
  const sites = stats.sites || [];
  // One histogram per site; a one-site view (the common case) gets one plot.
  sites.forEach((site, k) => {
    const u = site.update_statistics;
    const hist = u.update_probability_histogram;
    const width = hist.bucket_width;
    // never-updated tuples get a bar of their own: their rate is no observation of an update
    const labels = ["never", ...hist.counts.map((_, i) => `${(i * width).toFixed(1)}`)];
    const values = [hist.never_updated || 0, ...hist.counts];
    const sub = el("div", { class: "subplot" });
    figure.append(sub);
    const notes = [
      `${count(u.tuples)} tuples, ${count(u.tuples_ever_updated)} ever updated; ${count(u.updates_observed)} updates in ` +
        `${count(u.observations)} observations (mean ${u.mean_tno === null ? "–" : u.mean_tno.toFixed(1)} syncs seen per tuple)`,
      `deletion probability ω− ${fmtProbability(site.deletion_statistics.deletion_probability)}`,
    ];
    drawPlot(sub, {
      id: k === 0 ? "stats" : `stats-${k}`,
      title: sites.length > 1 ? `${title}: site ${k} (${site.source})` : title,
      labels,
      xTitle: `observed update rate = updates / syncs since entry (never updated apart), buckets of ${width}`,
      series: [{ name: "tuples", kind: "bar", cls: "s-hist", values }],
      format: (v) => count(Math.round(v)),
      log: false,
      notes,
    });
  });
}

function fmtProbability(p) {
  if (p === null || p === undefined) return "–";
  if (typeof p === "string") return p;
  return p === 0 ? "0" : p < 0.001 ? p.toExponential(2) : p.toFixed(4);
}

// ---------------------------------------------------------------- sections

function renderSources(sources) {
  const body = document.querySelector("#sources tbody");
  body.replaceChildren();
  for (const src of sources) {
    const health = sourceHealth(src);
    body.append(
      el(
        "tr",
        { "data-source": src.name },
        el("td", {}, src.name),
        el("td", { class: "mono" }, src.url),
        el("td", {}, src.has_token ? "yes" : "no"),
        el("td", {}, when(src.created_at)),
        el("td", {}, health),
      ),
    );
  }
  if (!sources.length) body.append(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "no sources registered (POST /v1/sources)")));
}

// The source's health as the service has it: how its agent answered the last contact (a
// sync's, or the service's periodic check: reachable, token taken), and since when.
function sourceHealth(src) {
  const h = src.health;
  if (!h) return el("span", { class: "muted" }, "not checked yet");
  const ok = h.status === "ok";
  const wrap = el("span", { class: "source-health", "data-status": h.status, title: h.error || "" }, badge(h.status, ok ? "ok" : "failed"));
  wrap.append(` since ${ago(h.since)}, checked ${ago(h.checked_at)}`);
  if (!ok && h.error) wrap.append(el("span", { class: "error-text" }, `: ${h.error.slice(0, 120)}`));
  return wrap;
}

function renderViews() {
  const body = document.querySelector("#views tbody");
  body.replaceChildren();
  for (const view of state.views) {
    const syncs = state.syncs[view.name] || [];
    const last = syncs[0];
    const finished = syncs.filter((s) => s.status === "succeeded");
    const m = (last && last.metrics) || {};
    const isLoad = last && finished.length <= 1 && last === finished[finished.length - 1];
    const row = el(
      "tr",
      { "data-view": view.name, class: view.name === state.selected ? "selected" : "" },
      el("td", {}, el("a", { href: `#view=${encodeURIComponent(view.name)}` }, view.name)),
      el("td", {}, view.strategy),
      el("td", {}, [...new Set(view.sites.map((s) => s.source))].join(", ")),
      el("td", {}, last ? badge(last.status) : el("span", { class: "muted" }, "never")),
      el("td", { class: "recent" }, ...recentDots(syncs)),
      el("td", { title: last ? when(last.finished_at || last.started_at || last.created_at) : "" }, last ? ago(last.finished_at || last.started_at || last.created_at) : ""),
      // the data's age: since the start of the last succeeded sync (the sources' state the rows hold)
      el(
        "td",
        { class: "data-age", title: view.data_as_of ? `rows as of ${when(view.data_as_of)}` : "no succeeded sync: no rows yet" },
        view.data_as_of ? ago(view.data_as_of) : el("span", { class: "muted" }, "no data"),
      ),
      el("td", {}, last && last.status === "succeeded" ? ranAs(last, isLoad) : ""),
      el("td", {}, last && last.status === "succeeded" ? bytes(movedBytes(m)) : ""),
      el("td", {}, last && last.status === "succeeded" ? `+${count(m.rows_inserted)} ~${count(m.rows_updated)} −${count(m.rows_deleted)}` : ""),
      el("td", { class: "published" }, ...published(view)),
      el("td", {}, el("button", { type: "button", class: "sync-now", disabled: last && ACTIVE.has(last.status) ? "" : null, onclick: () => startSync(view.name) }, "sync now")),
    );
    body.append(row);
  }
  if (!state.views.length) body.append(el("tr", {}, el("td", { colspan: 12, class: "muted" }, "no views defined (POST /v1/views)")));
}

// Where the view is published, one line per destination: its kind, and caught up or how many
// changing syncs behind (with the last error as a tooltip).
function published(view) {
  const destinations = view.destinations || [];
  if (!destinations.length) return [el("span", { class: "muted" }, "none")];
  return destinations.map((d) => {
    const where = d.uri || (d.catalog ? `${d.table} in the ${d.catalog.type} iceberg catalog` : `${d.table} at ${d.url}`);
    const state = d.error ? badge("failed", `${d.lag_syncs} behind`) : d.lag_syncs ? `${d.lag_syncs} behind` : "caught up";
    return el("div", { title: d.error ? `${where}: ${d.error}` : `${where}: applied ${d.applied_sync || "nothing yet"}` }, `${d.kind}: `, state);
  });
}

// The view's last syncs as dots, oldest left: green succeeded, red failed, amber under way.
const RECENT_SYNCS = 12;

function recentDots(syncs) {
  return syncs
    .slice(0, RECENT_SYNCS)
    .reverse()
    .map((s) => {
      const m = s.metrics || {};
      const what = s.status === "succeeded" ? `, ${bytes(movedBytes(m))}, ${seconds(m.wall_seconds)} s` : s.error ? `: ${s.error.slice(0, 200)}` : "";
      return el("i", { class: `dot ${s.status}`, title: `${when(s.started_at || s.created_at)} ${s.status}${what}` });
    });
}

function renderDetail() {
  const section = document.getElementById("view-detail");
  const view = state.views.find((v) => v.name === state.selected);
  if (!view) { section.hidden = true; return; }
  section.hidden = false;
  section.setAttribute("data-view", view.name);
  document.getElementById("detail-name").textContent = view.name;
  document.getElementById("detail-sql").textContent = view.sql;
  const all = state.syncs[view.name] || [];
  renderProgress(all.find((s) => ACTIVE.has(s.status)));

  const finished = all.filter((s) => s.status === "succeeded" || s.status === "failed").slice(0, MAX_SYNCS).reverse();
  const firstOk = all.filter((s) => s.status === "succeeded").slice(-1)[0];
  const labels = finished.map((s) => `#${all.length - all.indexOf(s)}`);
  const ms = finished.map((s) => s.metrics || {});
  const full = ms.map(fullShipBytes);
  const lower = ms.map((m, i) => (finished[i].status === "succeeded" ? lowerBoundBytes(m) : null));
  const notes = [];
  if (full.every((v) => v === null)) notes.push("full ship: not known yet (the metrics estimate it once a sync has measured the cost model; a view's first sync assumes one)");
  else notes.push("full ship: the sync's estimate of shipping the whole site queries (Φ_t × rows scanned); none where the cost model was assumed");
  if (lower.every((v) => v === null)) notes.push("lower bound: not known (the sync metrics hold no lower bound; it is estimated from a measured cost model, which this view's syncs lack so far)");
  else notes.push("lower bound: an estimate, not in the metrics: changed rows × Φ_t + deleted keys × Φ_k with the sync's cost model");
  if (finished.some((s) => s === firstOk)) notes.push(`${labels[finished.indexOf(firstOk)]} is the load`);
  drawPlot(document.getElementById("plot-bytes"), {
    id: "bytes",
    title: "Bytes per sync (to + from the agent), log scale",
    labels,
    log: true,
    format: bytes,
    tickFormat: decimalBytes,
    series: [
      { name: "moved", kind: "line", cls: "s-moved", values: ms.map(movedBytes) },
      { name: "full ship (est.)", kind: "line", cls: "s-full", values: full, r: 3 },
      { name: "lower bound (est.)", kind: "line", cls: "s-lower", values: lower, r: 3 },
    ],
    notes,
  });
  drawPlot(document.getElementById("plot-time"), {
    id: "time",
    title: "Sync time (wall seconds)",
    labels,
    log: false,
    format: (v) => `${seconds(v)} s`,
    series: [
      { name: "succeeded", kind: "bar", cls: "s-time", values: finished.map((s) => (s.status === "succeeded" ? (s.metrics || {}).wall_seconds ?? null : null)) },
      { name: "failed", kind: "bar", cls: "s-failed", values: finished.map((s) => (s.status === "failed" ? (s.metrics || {}).wall_seconds ?? null : null)) },
    ],
  });
  drawPlot(document.getElementById("plot-rows"), {
    id: "rows",
    title: "Rows changed per sync, log scale",
    labels,
    log: true,
    format: (v) => count(Math.round(v)),
    series: [
      { name: "inserted", kind: "line", cls: "s-ins", values: ms.map((m) => m.rows_inserted ?? null) },
      { name: "updated", kind: "line", cls: "s-upd", values: ms.map((m) => m.rows_updated ?? null) },
      { name: "deleted", kind: "line", cls: "s-del", values: ms.map((m) => m.rows_deleted ?? null) },
    ],
    notes: ["a sync that changed none of a kind has no point for it (log scale)"],
  });
  drawHistogram(document.getElementById("plot-stats"), state.stats[view.name]);
  renderSyncTable(all, firstOk);
}

function renderProgress(active) {
  const box = document.getElementById("progress");
  if (!active) { box.hidden = true; box.setAttribute("data-status", "idle"); box.removeAttribute("data-sync"); return; }
  box.hidden = false;
  box.setAttribute("data-status", active.status);
  box.setAttribute("data-sync", active.id);
  const p = active.progress || {};
  const since = active.started_at || active.created_at;
  const parts = [badge(active.status), ` sync ${active.id.slice(0, 8)} `, el("span", { class: "muted" }, `since ${when(since)} (${ago(since)})`)];
  const facts = el("dl");
  const add = (k, v) => facts.append(el("dt", {}, k), el("dd", {}, v));
  if (active.status === "queued") add("waiting", "for a free runner");
  if (p.phase) add("phase", p.phase.replaceAll("_", " ") + (p.site !== undefined ? ` (site ${p.site})` : ""));
  if (p.bytes_to_agent !== undefined) add("to agent", bytes(p.bytes_to_agent));
  if (p.bytes_from_agent !== undefined) add("from agent", bytes(p.bytes_from_agent));
  if (p.round_trips !== undefined) add("round trips", count(p.round_trips));
  if (p.rows_received !== undefined) add("rows received", count(p.rows_received));
  for (const [k, v] of Object.entries(p)) {
    if (["phase", "site", "bytes_to_agent", "bytes_from_agent", "round_trips", "rows_received"].includes(k)) continue;
    if (typeof v === "number" || typeof v === "string") add(k.replaceAll("_", " "), typeof v === "number" ? count(v) : v);
  }
  if (active.status === "running" && !active.progress) add("phase", "starting");
  box.replaceChildren(el("div", {}, ...parts), facts);
}

function renderSyncTable(all, firstOk) {
  const body = document.querySelector("#syncs tbody");
  body.replaceChildren();
  for (const s of all.slice(0, MAX_SYNCS)) {
    const m = s.metrics || {};
    const done = s.status === "succeeded" || s.status === "failed";
    body.append(
      el(
        "tr",
        { "data-sync": s.id, "data-status": s.status },
        el("td", { class: "mono", title: s.id }, s.id.slice(0, 8)),
        el("td", {}, badge(s.status)),
        el("td", {}, when(s.started_at || s.created_at)),
        el("td", {}, done ? seconds(m.wall_seconds) : ""),
        el("td", {}, s.status === "succeeded" ? ranAs(s, s === firstOk) : ""),
        el("td", {}, done ? bytes(m.bytes_to_agent) : ""),
        el("td", {}, done ? bytes(m.bytes_from_agent) : ""),
        el("td", {}, count(m.rows_inserted)),
        el("td", {}, count(m.rows_updated)),
        el("td", {}, count(m.rows_deleted)),
        el("td", { class: "error-text", title: s.error || "" }, s.error ? s.error.slice(0, 160) : ""),
      ),
    );
  }
  if (!all.length) body.append(el("tr", {}, el("td", { colspan: 11, class: "muted" }, `no syncs yet (POST /v1/views/${state.selected}/syncs)`)));
}

// ---------------------------------------------------------------- actions

async function startSync(view) {
  const message = document.getElementById("action-message");
  const r = await fetch(`${BASE}/v1/views/${encodeURIComponent(view)}/syncs`, { method: "POST", headers: keyHeaders({}) });
  if (r.status === 401) {
    state.pendingSync = view;
    askForKey("This service needs an API key (scope sync or admin) to start a sync:");
    return;
  }
  const body = await r.json().catch(() => ({}));
  message.textContent = r.ok ? `sync ${body.id.slice(0, 8)} of ${view} queued` : `${view}: ${r.status} ${JSON.stringify(body.detail)}`;
  if (r.ok) {
    state.selected = view;
    history.replaceState(null, "", `#view=${encodeURIComponent(view)}`);
  }
  refresh();
}

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  state.apiKey = document.getElementById("api-key").value;
  sessionStorage.setItem("deltasieve-api-key", state.apiKey); // this tab only: gone when it closes
  document.getElementById("key-form").hidden = true;
  const pending = state.pendingSync;
  state.pendingSync = null;
  if (pending) startSync(pending);
  else refresh();
});

window.addEventListener("hashchange", () => {
  state.selected = decodeURIComponent((location.hash.match(/^#view=(.+)$/) || [])[1] || "");
  renderViews();
  refresh();
});

// ---------------------------------------------------------------- the refresh loop

// Every IDLE_REFRESH_S the page reads everything; in between (while a sync is active) only
// the syncs of the views with an active sync and of the selected view.
async function refresh() {
  clearTimeout(state.timer);
  const status = document.getElementById("service-status");
  try {
    const full = Date.now() - state.lastFull >= IDLE_REFRESH_S * 1000 - 250;
    if (full) await readEverything(status);
    else await readActive();
    if (!state.views.some((v) => v.name === state.selected)) state.selected = state.views.length ? state.views[0].name : "";
    await loadStatistics();
    renderSources(state.sources);
    renderViews();
    renderDetail();
    document.getElementById("refreshed").textContent = `updated ${when(new Date().toISOString())}`;
    document.getElementById("load-error").hidden = true;
    document.body.setAttribute("data-loaded", "true");
  } catch (err) {
    state.lastFull = 0;
    // fetch() rejects with a TypeError when no answer came at all
    status.replaceChildren(err instanceof TypeError ? "service unreachable" : "API error");
    status.className = "badge failed";
    status.setAttribute("data-status", "down");
    const box = document.getElementById("load-error");
    box.hidden = false;
    box.textContent = String(err.message || err);
  }
  const busy = Object.values(state.syncs).some((l) => l.some((s) => ACTIVE.has(s.status)));
  state.timer = setTimeout(refresh, (busy ? BUSY_REFRESH_S : IDLE_REFRESH_S) * 1000);
}

async function readEverything(status) {
  const [health, sources, views] = await Promise.all([getJson("/health"), getJson("/v1/sources"), getJson("/v1/views")]);
  status.replaceChildren(health.status === "ok" ? "service ok" : `service: ${health.status}`);
  status.className = "badge succeeded";
  status.setAttribute("data-status", "ok");
  // A view deleted between the two reads is left out until the next refresh.
  const lists = await Promise.all(views.map((v) => readSyncs(v.name)));
  state.sources = sources;
  state.views = views.filter((_, i) => lists[i] !== null);
  state.syncs = Object.fromEntries(views.map((v, i) => [v.name, lists[i]]).filter(([, l]) => l !== null));
  state.lastFull = Date.now();
}

async function readActive() {
  const names = state.views
    .map((v) => v.name)
    .filter((name) => name === state.selected || (state.syncs[name] || []).some((s) => ACTIVE.has(s.status)));
  const lists = await Promise.all(names.map(readSyncs));
  names.forEach((name, i) => {
    if (lists[i] !== null) state.syncs[name] = lists[i];
  });
}

function readSyncs(name) {
  return getJson(`/v1/views/${encodeURIComponent(name)}/syncs`).catch(() => null);
}

// The statistics of the selected view, read again only when a newer sync has succeeded
// (asking before the load would be a 409).
async function loadStatistics() {
  const name = state.selected;
  if (!name) return;
  const last = (state.syncs[name] || []).find((s) => s.status === "succeeded");
  if (!last) { state.stats[name] = null; state.statsFor[name] = null; return; }
  if (state.statsFor[name] === last.id) return;
  try {
    state.stats[name] = await getJson(`/v1/views/${encodeURIComponent(name)}/statistics`);
    state.statsFor[name] = last.id;
  } catch (err) {
    state.stats[name] = null; // e.g. the view was redefined meanwhile: next refresh tries again
  }
}

refresh();
