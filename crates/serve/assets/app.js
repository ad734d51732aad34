// posenc explorer: the page's four views. Every number comes from the server's JSON API
// (crates/serve/src/api.rs), computed by the library code the command line runs; this file
// only draws, with Apache ECharts.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

/**
 * The API's answer as JSON, or an Error carrying the server's own message. A 503 (every
 * worker busy: a page opened from an address asks for several views at once) is asked
 * again after its Retry-After, a few times.
 */
async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  };
  let response = await fetch(path, init);
  for (let tries = 0; response.status === 503 && tries < 10; tries++) {
    const wait = Number(response.headers.get("retry-after")) || 1;
    await new Promise((resolve) => setTimeout(resolve, wait * 1000));
    response = await fetch(path, init);
  }
  const text = await response.text();
  let value;
  try { value = JSON.parse(text); } catch (_) { value = { error: text }; }
  if (!response.ok) throw new Error(value.error || `${response.status}`);
  return value;
}

/** One ECharts instance per element, made on first use; resized with the window. Each
 * has a toolbox: the chart as a PNG, and its data as CSV. */
const charts = new Map();
function chart(element) {
  let c = charts.get(element);
  if (!c) {
    c = echarts.init(element, null, { renderer: "canvas" });
    charts.set(element, c);
    const setOption = c.setOption.bind(c);
    const toolbox = { orient: "vertical", right: 0, top: 22, itemSize: 12, itemGap: 6, feature: {
      saveAsImage: { title: "PNG", pixelRatio: 2 },
      myCsv: { title: "CSV", icon: "path://M2 2h20v20H2zM6 8h12M6 12h12M6 16h12", onclick: () => downloadCsv(element) },
    } };
    c.setOption = (option, ...rest) => setOption({ ...option, toolbox }, ...rest);
  }
  return c;
}

/** A chart's data as CSV: a row per point of each series, category axes by their names. */
function csvOf(element) {
  const option = chart(element).getOption();
  const categories = (axes) => ((axes || [])[0] || {}).data;
  const [xs, ys] = [categories(option.xAxis), categories(option.yAxis)];
  const name = (list, v) => (list && Number.isInteger(v) && list[v] !== undefined ? (list[v].value ?? list[v]) : v);
  const quote = (v) => (/[",\n]/.test(String(v)) ? `"${String(v).replace(/"/g, '""')}"` : String(v ?? ""));
  const rows = [["series", "x", "y", "value"]];
  for (const s of option.series || []) {
    for (const d of s.data || []) {
      const v = Array.isArray(d) ? d : [].concat(d && d.value !== undefined ? d.value : d);
      rows.push([s.name ?? s.type, name(xs, v[0]), name(ys, v[1]), v[2]]);
    }
  }
  return rows.map((r) => r.map(quote).join(",")).join("\n") + "\n";
}
window.csvOf = csvOf;

function downloadCsv(element) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([csvOf(element)], { type: "text/csv" }));
  link.download = "chart.csv";
  link.click();
  URL.revokeObjectURL(link.href);
}
window.addEventListener("resize", () => charts.forEach((c) => c.resize()));

// The diverging and sequential maps of the static figures.
const DIVERGING = ["#3b4cc0", "#8db0fe", "#dddddd", "#f49a7b", "#b40426"];
const SEQUENTIAL = ["#ffffff", "#c6dbef", "#6baed6", "#2171b5", "#08306b"];

function extent(rows) {
  let lo = Infinity, hi = -Infinity;
  for (const row of rows) for (const v of row) {
    if (v === null || v === undefined) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return lo <= hi ? [lo, hi] : [0, 1];
}

/**
 * A heatmap of `values[row][column]`, rows downwards. A null cell is a score shut out
 * (−∞, left blank), or with `missing` ("no data") a cell no record holds, drawn grey and
 * labelled so.
 */
function heatmap(element, { title, rows, columns, values, rowName, columnName, colours, range, compact, missing }) {
  const data = [];
  const absent = [];
  values.forEach((row, r) => row.forEach((v, c) => {
    // A number, so the cell is drawn (its colour is its series', not the scale's).
    if (v === null && missing) absent.push([c, r, 0]);
    else data.push([c, r, v === null ? "-" : v]);
  }));
  // The title wraps at the chart's width (the page's, while its view is still hidden), and
  // the cells start below its last line.
  const width = Math.max(200, (element.clientWidth || document.body.clientWidth - 60) - 20);
  const lines = Math.max(1, Math.ceil((title.length * (compact ? 6.2 : 7.4)) / width));
  const top = compact ? 13 * lines + 13 : 17 * lines + 35;
  const [lo, hi] = range || extent(values);
  const symmetric = lo < 0 && hi > 0;
  const bound = Math.max(Math.abs(lo), Math.abs(hi));
  chart(element).setOption({
    animation: false,
    // A long title (an encoding with many settings) breaks onto a second line.
    title: { text: title, left: "center",
      textStyle: { fontSize: compact ? 11 : 13, lineHeight: compact ? 13 : 17,
        width, overflow: "break" } },
    tooltip: {
      formatter: (p) => `${rowName} ${rows[p.value[1]]}, ${columnName} ${columns[p.value[0]]}: ` +
        (p.seriesIndex === 1 ? missing : p.value[2] === "-" ? "−∞ (shut out)" : Number(p.value[2]).toPrecision(4)),
    },
    // Room on the left for the longest row label (`ikakeru`), on the right for the toolbox.
    // and on the right for the scale's end labels ("−1024"), drawn beside its bar.
    grid: compact ? { left: Math.max(40, 6 * Math.max(...rows.map((r) => String(r).length)) + 10), right: 22, top, bottom: 40 }
      : { left: 60, right: 50 + 8 * Math.max(...(symmetric ? [-bound, bound] : [lo, hi]).map((v) => String(Math.round(v)).length)), top, bottom: 50 },
    xAxis: { type: "category", data: columns, name: compact ? "" : columnName, nameLocation: "center", nameGap: 28,
      axisLabel: { rotate: compact ? 60 : 0, fontSize: compact ? 9 : 11 } },
    yAxis: { type: "category", data: rows, inverse: true, name: compact ? "" : rowName, nameLocation: "center", nameGap: 44,
      axisLabel: { fontSize: compact ? 9 : 11 } },
    visualMap: {
      seriesIndex: 0,
      // Enough digits that the ends of a narrow range (0.998 to 1) read apart.
      precision: Math.max(0, Math.min(6, Math.ceil(-Math.log10(Math.max(hi - lo, 1e-6))) + 1)),
      min: symmetric ? -bound : lo, max: symmetric ? bound : (hi > lo ? hi : lo + 1),
      calculable: !compact, show: !compact, orient: "vertical", right: 0, top: "middle",
      inRange: { color: colours || (symmetric ? DIVERGING : SEQUENTIAL) },
      outOfRange: { color: "#000" },
    },
    series: [
      { type: "heatmap", data, progressive: 0, emphasis: { disabled: true } },
      { type: "heatmap", data: absent, itemStyle: { color: "#eeeeee" }, emphasis: { disabled: true },
        label: { show: true, color: "#777", formatter: () => missing } },
    ],
  }, true);
}

// ---------------------------------------------------------------- views and tabs

// ---------------------------------------------------------------- state in the address

/**
 * The view and the encodings' settings, in the address's fragment
 * (`#view=encodings&a={…}&b={…}&d_model=512&heads=8&len=2048&compare=1`), with the chosen
 * study, its axes, the long-context records and their filters (`lcf`), so a view can be
 * linked, shared and reloaded. Written on every change; read once, at the start.
 */
const STATE_FIELDS = { d_model: "#d-model", heads: "#heads", len: "#len" };
const RESULTS_FIELDS = { results: "#results-file", y: "#results-y", x: "#results-x", group: "#results-group",
  logx: "#results-logx", logy: "#results-logy", lc: "#lc-file" };
let restoring = true;

function saveState() {
  if (restoring) return;
  const state = new URLSearchParams();
  state.set("view", ($("nav button.active") || {}).dataset?.view || "encodings");
  for (const pane of $$(".pane[data-pane]")) state.set(pane.dataset.pane, $(".config", pane).value.replace(/\s+/g, " ").trim());
  for (const [key, id] of Object.entries(STATE_FIELDS)) state.set(key, $(id).value);
  state.set("compare", $("#compare").checked ? "1" : "0");
  // The chosen study, its axes and the long-context records, once the lists are filled.
  // Until the records are listed, the address keeps what it opened with.
  const listed = $("#results-file").options.length > 0;
  for (const [key, id] of Object.entries(RESULTS_FIELDS)) {
    const e = $(id);
    const value = !listed ? OPENED[key] : e.type === "checkbox" ? (e.checked ? "1" : "") : e.value;
    if (value) state.set(key, value);
  }
  // The long-context filters, as `{"column": "<JSON value>"}`: "{}" is none chosen.
  const filters = {};
  for (const select of $$("#lc-filters select")) if (select.value) filters[select.dataset.column] = select.value;
  const lcf = $$("#lc-filters select").length ? JSON.stringify(filters) : OPENED.lcf;
  if (lcf) state.set("lcf", lcf);
  history.replaceState(null, "", `#${state}`);
}

/** The state the address held when the page opened: `{view, a, b, d_model, …}`. */
const OPENED = Object.fromEntries(new URLSearchParams(location.hash.slice(1)).entries());
function addressState() {
  return OPENED;
}

function show(view) {
  $$("nav button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
  $$(".view").forEach((v) => v.classList.toggle("active", v.id === `view-${view}`));
  charts.forEach((c) => c.resize());
  if (view === "results" && !$("#results-file").options.length) loadRecordsList();
  if (view === "long-context" && !$("#lc-file").options.length) loadRecordsList();
  saveState();
}
$$("nav button").forEach((b) => b.addEventListener("click", () => show(b.dataset.view)));

// ---------------------------------------------------------------- Encodings

let KINDS = [];
const defaults = (kind) => KINDS.find((k) => k.kind === kind) || { kind };

function setPane(pane, config) {
  $(".kind", pane).value = config.kind;
  $(".config", pane).value = JSON.stringify(config, null, 1);
}

const PRESETS = {
  "yarn": [{ kind: "rope" }, { kind: "rope", scaling: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 512 } }],
  "alibi-kerple": [{ kind: "alibi" }, { kind: "kerple" }],
  "sin-rope": [{ kind: "sinusoidal" }, { kind: "rope" }],
};

async function initEncodings() {
  const copy = $("#pane-a").cloneNode(true);
  copy.id = "pane-b";
  copy.dataset.pane = "b";
  $("#pane-a").after(copy);
  KINDS = await api("/api/kinds");
  for (const pane of $$(".pane[data-pane]")) {
    const select = $(".kind", pane);
    for (const k of KINDS) select.add(new Option(k.kind, k.kind));
    select.addEventListener("change", () => {
      setPane(pane, defaults(select.value));
      pane.dataset.gridSet = "";
      redraw(pane);
    });
    $(".config", pane).addEventListener("input", () => schedule(pane));
    $(".position", pane).addEventListener("input", () => drawPairs(pane));
    $(".head", pane).addEventListener("change", () => { drawTable(pane); drawGrid(pane); });
    for (const input of $$(".grid-box input", pane)) {
      input.addEventListener("input", () => { pane.dataset.gridSet = "1"; schedule(pane); });
    }
    // A click on a patch of the grid view queries from it.
    chart($(".grid-map", pane)).on("click", (p) => {
      $(".query-row", pane).value = String(p.value[1]);
      $(".query-column", pane).value = String(p.value[0]);
      pane.dataset.gridSet = "1";
      redraw(pane);
    });
  }
  for (const id of ["#d-model", "#heads", "#len"]) {
    $(id).addEventListener("input", () => $$(".pane[data-pane]").forEach(schedule));
  }
  $("#compare").addEventListener("change", () => {
    saveState();
    $("#pane-b").style.display = $("#compare").checked ? "" : "none";
    charts.forEach((c) => c.resize());
  });
  $$("[data-preset]").forEach((b) => b.addEventListener("click", () => {
    const [a, bConfig] = PRESETS[b.dataset.preset];
    setPane($("#pane-a"), { ...defaults(a.kind), ...a });
    setPane($("#pane-b"), { ...defaults(bConfig.kind), ...bConfig });
    $$(".pane[data-pane]").forEach(redraw);
  }));
  // The address's state, else the first preset.
  const state = addressState();
  for (const [key, id] of Object.entries(STATE_FIELDS)) if (state[key]) $(id).value = state[key];
  if (state.compare) {
    $("#compare").checked = state.compare === "1";
    $("#pane-b").style.display = $("#compare").checked ? "" : "none";
  }
  const [a, b] = PRESETS["yarn"];
  setPane($("#pane-a"), { ...defaults(a.kind), ...a });
  setPane($("#pane-b"), { ...defaults(b.kind), ...b });
  for (const pane of $$(".pane[data-pane]")) {
    const text = state[pane.dataset.pane];
    if (!text) continue;
    $(".config", pane).value = text;
    try { $(".kind", pane).value = JSON.parse(text).kind; } catch (_) { /* the pane names the error */ }
  }
  if (state.view) show(state.view);
  restoring = false;
  saveState();
  $$(".pane[data-pane]").forEach(redraw);
}

const timers = new WeakMap();
function schedule(pane) {
  clearTimeout(timers.get(pane));
  timers.set(pane, setTimeout(() => redraw(pane), 120));
}

/** `kind` with the settings that differ from its defaults: `rope scaling={…}`. */
function labelOf(config) {
  const base = defaults(config.kind);
  const changed = Object.keys(config).filter((k) => k !== "kind" &&
    JSON.stringify(config[k]) !== JSON.stringify(base[k]));
  return [config.kind, ...changed.map((k) => `${k}=${JSON.stringify(config[k])}`)].join(" ");
}

const views = new WeakMap();
/** Fetches and draws one pane; the pane's `data-drawn` counts the redraws (tests read it). */
async function redraw(pane) {
  saveState();
  const error = $(".error", pane);
  let encoding;
  const text = $(".config", pane).value.trim();
  try {
    encoding = text.startsWith("{") ? JSON.parse(text) : text;
  } catch (e) {
    error.textContent = `malformed JSON: ${e.message}`;
    return;
  }
  const request = {
    encoding,
    d_model: Number($("#d-model").value),
    heads: Number($("#heads").value),
    len: Number($("#len").value),
  };
  // The image and query patch the pane's grid box sets, for the kind last drawn with a grid
  // view (a kind of one position a token refuses them).
  const last = views.get(pane);
  const kind = typeof encoding === "string" ? encoding.split(":")[0] : encoding.kind;
  if (pane.dataset.gridSet && last && last.grid && last.kind === kind) {
    const n = (selector) => Number($(selector, pane).value);
    request.grid = [n(".grid-rows"), n(".grid-columns")];
    request.query = [n(".query-row"), n(".query-column")];
  }
  const started = performance.now();
  let view;
  try {
    view = await api("/api/encoding", request);
  } catch (e) {
    error.textContent = e.message;
    return;
  }
  error.textContent = "";
  views.set(pane, view);
  // A bias has a matrix per head: the head picker shows one at a time.
  const heads = view.table.values.length;
  const picker = $(".head", pane);
  $(".head-box", pane).style.display = heads > 1 ? "" : "none";
  if (picker.options.length !== heads) {
    picker.innerHTML = "";
    for (let h = 0; h < heads; h++) picker.add(new Option(String(h), String(h)));
  }
  drawTable(pane);
  drawDistance(pane, view);
  const box = $(".pairs-box", pane);
  box.style.display = view.pairs ? "" : "none";
  if (view.pairs) {
    const slider = $(".position", pane);
    slider.max = String(view.pairs.positions.length - 1);
    if (Number(slider.value) > view.pairs.positions.length - 1) slider.value = "1";
    drawPairs(pane);
  }
  $(".grid-box", pane).style.display = view.grid ? "" : "none";
  if (view.grid) {
    const [rows, columns] = view.grid.grid;
    const [qr, qc] = view.grid.query;
    $(".grid-rows", pane).value = String(rows);
    $(".grid-columns", pane).value = String(columns);
    $(".query-row", pane).value = String(qr);
    $(".query-column", pane).value = String(qc);
    drawGrid(pane);
  }
  $(".layout", pane).style.display = view.layout ? "" : "none";
  if (view.layout) drawLayout(pane, view.layout);
  const ms = performance.now() - started;
  pane.dataset.drawn = String(Number(pane.dataset.drawn || 0) + 1);
  pane.dataset.ms = ms.toFixed(1);
  $("#timing").textContent = `last redraw ${ms.toFixed(0)} ms`;
}

function drawTable(pane) {
  const view = views.get(pane);
  if (!view) return;
  const t = view.table;
  const head = Math.min(Number($(".head", pane).value || 0), t.values.length - 1);
  heatmap($(".heatmap", pane), {
    title: `${labelOf(view.config)}: ${t.title}` + (t.values.length > 1 ? ` (head ${head})` : ""),
    rows: t.rows, columns: t.columns, values: t.values[head],
    rowName: t.row_name, columnName: t.column_name,
  });
}

/** The query patch's interaction with every patch, for a kind that reads coordinates. */
function drawGrid(pane) {
  const view = views.get(pane);
  if (!view || !view.grid) return;
  const g = view.grid;
  const head = Math.min(Number($(".head", pane).value || 0), g.values.length - 1);
  const [rows, columns] = g.grid;
  heatmap($(".grid-map", pane), {
    title: g.title + (g.values.length > 1 ? ` (head ${head})` : ""),
    rows: Array.from({ length: rows }, (_, i) => i), columns: Array.from({ length: columns }, (_, i) => i),
    values: g.values[head], rowName: "row", columnName: "column",
  });
}

/** Each token's (time, row, column) in a sequence of text, an image and text. */
function drawLayout(pane, layout) {
  const first = layout.segment.indexOf("image");
  const last = layout.segment.lastIndexOf("image");
  const element = $(".layout", pane);
  const width = Math.max(200, (element.clientWidth || 600) - 60);
  chart(element).setOption({
    animation: false,
    title: { text: layout.title, textStyle: { fontSize: 12, width, overflow: "break" }, left: "center" },
    tooltip: { trigger: "axis" },
    // On the right, clear of the image's label over its span.
    legend: { top: 44, right: 40 },
    grid: { left: 50, right: 30, top: 76, bottom: 46 },
    xAxis: { type: "value", name: "token", nameLocation: "center", nameGap: 28, min: 0, max: layout.coords.length - 1 },
    yAxis: { type: "value", name: "position", minInterval: 1 },
    series: ["time", "row", "column"].map((name, axis) => ({
      name, type: "line", step: "end", symbolSize: 4,
      lineStyle: { type: ["solid", "dashed", "dotted"][axis] },
      data: layout.coords.map((c, i) => [i, c[axis]]),
      markArea: axis === 0 && first >= 0 ? { silent: true, itemStyle: { color: "rgba(31, 119, 180, 0.08)" },
        data: [[{ xAxis: first, name: "image" }, { xAxis: last }]] } : undefined,
    })),
  }, true);
}

function drawDistance(pane, view) {
  const d = view.by_distance;
  const heads = d.values.length;
  chart($(".distance", pane)).setOption({
    animation: false,
    title: { text: d.title, textStyle: { fontSize: 12 }, left: "center" },
    tooltip: { trigger: "axis", valueFormatter: (v) => (v === null || v === undefined ? "−∞" : Number(v).toPrecision(4)) },
    // Clear of the toolbox at the top right.
    legend: { show: heads > 1 && heads <= 16, top: 22, type: "scroll", left: 10, right: 40 },
    grid: { left: 60, right: 20, top: heads > 1 ? 56 : 36, bottom: 46 },
    xAxis: { type: "value", name: "distance k", nameLocation: "center", nameGap: 28, min: 0, max: d.values[0].length - 1 },
    yAxis: { type: "value", scale: true },
    series: d.values.map((values, h) => ({
      name: heads > 1 ? `head ${h}` : view.kind,
      type: "line", showSymbol: false, connectNulls: false,
      // Sampled distances (a kind whose scores cost a rotation of every position) where given.
      data: values.map((v, i) => [d.distances ? d.distances[i] : i, v]),
    })),
  }, true);
}

function drawPairs(pane) {
  const view = views.get(pane);
  if (!view || !view.pairs) return;
  const p = view.pairs;
  const row = Math.min(Number($(".position", pane).value), p.positions.length - 1);
  $(".position-value", pane).textContent = p.positions[row];
  const n = p.pairs.length;
  const data = p.pairs.map((pair, i) => ({
    value: [p.x[row][i], p.y[row][i], pair],
    itemStyle: { color: echarts.color.modifyHSL("#1f77b4", (i / n) * 300) },
  }));
  // A scaled rotation (YaRN's attention factor) lies off the unit circle: the axes hold it.
  let radius = 1;
  p.x.forEach((xs, r) => xs.forEach((x, i) => { radius = Math.max(radius, Math.hypot(x, p.y[r][i])); }));
  const bound = Math.ceil(radius * 11) / 10;
  const element = $(".pairs", pane);
  // Square, so the circle is round.
  const off = radius > 1.001;
  const side = Math.max(100, Math.min(element.clientWidth, element.clientHeight) - (off ? 80 : 60));
  chart(element).setOption({
    animation: false,
    title: { text: `each pair's (cos, sin) at position ${p.positions[row]}; colour runs fast → slow`,
      subtext: radius > 1.001 ? `radius ${radius.toFixed(3)}: YaRN scales cos and sin by its attention factor 0.1 ln s + 1` : "",
      textStyle: { fontSize: 12 }, subtextStyle: { fontSize: 11, color: "#555" }, itemGap: 4, left: "center" },
    tooltip: { formatter: (q) => `pair ${q.value[2]}: angle ${(Math.atan2(q.value[1], q.value[0]) * 180 / Math.PI).toFixed(1)}°, radius ${Math.hypot(q.value[0], q.value[1]).toFixed(3)}` },
    grid: { width: side, height: side, left: "center", top: off ? 56 : 36 },
    xAxis: { type: "value", min: -bound, max: bound, splitLine: { show: false } },
    yAxis: { type: "value", min: -bound, max: bound, splitLine: { show: false } },
    series: [
      { type: "line", showSymbol: false, silent: true, lineStyle: { color: "#ccc" },
        data: Array.from({ length: 73 }, (_, i) => [Math.cos(i * Math.PI / 36), Math.sin(i * Math.PI / 36)]) },
      { type: "scatter", symbolSize: 7, data },
    ],
  }, true);
}

// ---------------------------------------------------------------- Attention: translation

/** Empties the attention maps of the last translation. */
function clearAttention() {
  const grid = $("#attention-grid");
  charts.forEach((c, el) => { if (grid.contains(el)) { c.dispose(); charts.delete(el); } });
  grid.innerHTML = "";
  return grid;
}

async function translate() {
  const error = $("#translate-error");
  error.textContent = "";
  $("#translation").textContent = "…";
  let answer;
  try {
    answer = await api("/api/translate", { text: $("#sentence").value, model: $("#translator").value || null });
  } catch (e) {
    // A sentence that fails leaves no maps of the one before it.
    $("#translation").textContent = "";
    clearAttention();
    error.textContent = e.message;
    return;
  }
  $("#translation").textContent = answer.translation;
  const grid = clearAttention();
  const a = answer.attention;
  const add = (title, rows, columns, values) => {
    const cell = document.createElement("div");
    cell.className = "cell";
    grid.appendChild(cell);
    heatmap(cell, { title, rows, columns, values, rowName: "query", columnName: "key",
      colours: SEQUENTIAL, range: [0, 1], compact: true });
  };
  a.encoder.forEach((layer, l) => layer.forEach((head, h) =>
    add(`encoder layer ${l} head ${h}`, a.source, a.source, head)));
  a.cross.forEach((layer, l) => layer.forEach((head, h) =>
    add(`cross layer ${l} head ${h}`, a.target, a.source, head)));
  grid.dataset.drawn = String(Number(grid.dataset.drawn || 0) + 1);
}
$("#translate").addEventListener("click", translate);
$("#sentence").addEventListener("keydown", (e) => { if (e.key === "Enter") translate(); });

// ---------------------------------------------------------------- Attention: generation

let stream = null;
const runs = { a: null, b: null };

async function initModels() {
  const models = await api("/api/models");
  for (const m of models.translators || []) $("#translator").add(new Option(m.name, m.name));
  for (const m of models.lms) {
    $("#lm").add(new Option(m.name, m.name));
    $("#lm-b").add(new Option(m.name, m.name));
  }
  if (models.translation_error) $("#translate-error").textContent = models.translation_error;
  for (const id of ["#gen-layer", "#gen-head"]) $(id).addEventListener("change", () => { drawRun("a"); drawRun("b"); });
}

/**
 * Reads a server-sent-event stream from `response`, calling `on(name, data)` for each
 * event, until it ends or `signal` aborts it.
 */
async function readEvents(response, on) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trimStart();
      }
      if (data) on(name, JSON.parse(data));
    }
  }
}

/** Generates with `model` into side `side`; resolves to whether it ran to its end. */
async function generateOne(side, model) {
  const output = $(`#output-${side}`);
  output.innerHTML = "";
  const params = new URLSearchParams({
    model, prompt: $("#prompt").value,
    max_tokens: $("#max-tokens").value, temperature: $("#temperature").value,
    attention_every: $("#attention-every").value,
  });
  const run = { model, prompt: [], tokens: [], rows: [] };
  runs[side] = run;
  const controller = new AbortController();
  stream = controller;
  let failure = null, ended = false;
  try {
    const response = await fetch(`/api/generate?${params}`, { signal: controller.signal });
    if (!response.ok) {
      const value = await response.json().catch(() => ({}));
      throw new Error(value.error || `${response.status}`);
    }
    await readEvents(response, (name, data) => {
      if (name === "prompt") {
        run.prompt = data.tokens;
        const span = document.createElement("span");
        span.className = "prompt";
        span.textContent = run.prompt.join("");
        output.appendChild(span);
      } else if (name === "token") {
        run.tokens.push(data.text);
        run.rows.push(data.attention);
        output.appendChild(document.createTextNode(data.text));
        if (data.attention) fillSelectors(data.attention);
        drawRun(side);
      } else if (name === "error") {
        failure = data.error;
      } else if (name === "done") {
        ended = true;
      }
    });
  } catch (e) {
    if (e.name !== "AbortError") failure = e.message;
  }
  if (stream === controller) stream = null;
  if (failure) $("#generate-error").textContent = failure;
  output.dataset.done = String(ended);
  return ended;
}

function fillSelectors(rows) {
  const fill = (select, n, word) => {
    if (select.options.length === n) return;
    select.innerHTML = "";
    for (let i = 0; i < n; i++) select.add(new Option(`${word} ${i}`, String(i)));
  };
  fill($("#gen-layer"), rows.length, "layer");
  fill($("#gen-head"), rows[0].length, "head");
}

/** The running map: one row per generated token, over every position before it. */
function drawRun(side) {
  const run = runs[side];
  if (!run || !run.rows.length || !run.rows[0]) return;
  const layer = Number($("#gen-layer").value || 0), head = Number($("#gen-head").value || 0);
  const keys = run.prompt.concat(run.tokens.slice(0, -1)).map((t, i) => `${i}:${JSON.stringify(t).slice(1, -1)}`);
  const rows = run.tokens.map((t, i) => `${i}:${JSON.stringify(t).slice(1, -1)}`);
  const values = run.rows.map((r) => {
    const row = r ? r[layer][head] : [];
    return keys.map((_, k) => (k < row.length ? row[k] : null));
  });
  heatmap($(`#gen-map-${side}`), {
    title: `${run.model}: layer ${layer} head ${head}`, rows, columns: keys, values,
    rowName: "generated", columnName: "key", colours: SEQUENTIAL, range: [0, 1],
  });
}

async function generate() {
  $("#generate-error").textContent = "";
  $("#generate").disabled = true;
  $("#stop").disabled = false;
  runs.a = runs.b = null;
  $("#output-b").textContent = "";
  const ok = await generateOne("a", $("#lm").value);
  if (ok && $("#lm-b").value && !$("#stop").disabled) await generateOne("b", $("#lm-b").value);
  $("#generate").disabled = false;
  $("#stop").disabled = true;
}
$("#generate").addEventListener("click", generate);
$("#stop").addEventListener("click", () => {
  // Closing the stream stops the generation on the server at its next token.
  if (stream) stream.abort();
  stream = null;
  $("#stop").disabled = true;
  $("#generate").disabled = false;
});

// ---------------------------------------------------------------- Results and Long context

let RECORDS = [];
async function loadRecordsList() {
  RECORDS = await api("/api/records");
  const fill = (select, filter) => {
    select.innerHTML = "";
    for (const r of RECORDS.filter(filter)) select.add(new Option(r.study, r.path));
  };
  fill($("#results-file"), (r) => r.path.endsWith("results.json"));
  fill($("#lc-file"), (r) => /long-context|passkey|position|ruler/.test(r.path));
  const pick = (select, name) => {
    const found = Array.from(select.options).find((o) => o.value === name);
    if (found) select.value = name;
  };
  const state = addressState();
  pick($("#results-file"), state.results || "docs/lengthgen/sort/results.json");
  pick($("#lc-file"), state.lc || "docs/long-context/results.json");
  $("#results-logx").checked = state.logx === "1";
  $("#results-logy").checked = state.logy === "1";
  await Promise.all([resultsFileChanged(), lcFileChanged()]);
}

async function columnsOf(path) {
  return (await api(`/api/columns?path=${encodeURIComponent(path)}`)).columns;
}

/** The length the chosen study's models were trained to, marked on its chart by length. */
let TRAINED_LENGTH = null;

function options(select, names, preferred) {
  const keep = select.value;
  select.innerHTML = "";
  for (const n of names) select.add(new Option(n === "" ? "(none)" : n, n));
  // What was chosen stays chosen; a fresh list (or "(none)") takes the first preferred.
  const want = [...(keep ? [keep] : []), ...preferred, names[0]].find((n) => names.includes(n));
  if (want !== undefined) select.value = want;
}

let resultsRestored = false;
async function resultsFileChanged() {
  const path = $("#results-file").value;
  if (!path) return;
  try {
    const answer = await api(`/api/columns?path=${encodeURIComponent(path)}`);
    const cols = answer.columns;
    TRAINED_LENGTH = answer.trained_length;
    const numeric = cols.filter((c) => c.numeric && c.name !== "seed").map((c) => c.name);
    const categories = cols.filter((c) => c.values && c.name !== "seed").map((c) => c.name);
    // The address's choice first, on the first drawing only.
    const state = resultsRestored ? {} : addressState();
    resultsRestored = true;
    const first = (v) => (v === undefined ? [] : [v]);
    options($("#results-y"), numeric, [...first(state.y), "accuracy", "test_exact", "loss", "perplexity"]);
    options($("#results-x"), ["", ...categories], [...first(state.x), "length"]);
    options($("#results-group"), categories, [...first(state.group), "label", "encoding"]);
    await drawResults();
  } catch (e) { $("#results-error").textContent = e.message; }
}

async function drawResults() {
  const error = $("#results-error");
  error.textContent = "";
  const x = $("#results-x").value || null;
  const request = { path: $("#results-file").value, y: $("#results-y").value, x, group: $("#results-group").value };
  let series;
  try { series = await api("/api/aggregate", request); } catch (e) { error.textContent = e.message; return; }
  const numericX = series.every((s) => s.points.every((p) => typeof p.x === "number"));
  const categories = numericX ? null :
    Array.from(new Set(series.flatMap((s) => s.points.map((p) => String(p.x === null ? "all" : p.x)))));
  const at = (p) => (numericX ? p.x : String(p.x === null ? "all" : p.x));
  const out = [];
  for (const s of series) {
    // The seeds' range as a shaded polygon (drawn once, from the series' first point).
    if (s.points.some((p) => p.values.length > 1)) {
      const lo = s.points.map((p) => [at(p), Math.min(...p.values)]);
      const hi = s.points.map((p) => [at(p), Math.max(...p.values)]);
      const place = (api, [px, py]) => api.coord([numericX ? px : categories.indexOf(px), py]);
      out.push({ name: s.name, type: "custom", silent: true, tooltip: { show: false }, z: 1,
        data: [lo[0]], clip: true,
        renderItem: (params, api) => ({
          type: "polygon",
          shape: { points: lo.concat(hi.slice().reverse()).map((p) => place(api, p)) },
          style: { fill: s.colour, opacity: 0.18 },
        }) });
    }
    out.push({ name: s.name, type: "line", z: 3, data: s.points.map((p) => ({ value: [at(p), p.mean], point: p })),
      itemStyle: { color: s.colour }, lineStyle: { color: s.colour, width: 2, type: s.dash || "solid" }, symbolSize: 6 });
    out.push({ name: s.name, type: "scatter", symbol: "emptyCircle", symbolSize: 5, itemStyle: { color: s.colour },
      z: 2, data: s.points.flatMap((p) => p.values.map((v) => [at(p), v])), tooltip: { show: false } });
  }
  // The trained length, on a chart by length: past it, the models extrapolate.
  const trained = x === "length" && numericX && TRAINED_LENGTH !== null ? TRAINED_LENGTH : null;
  if (trained !== null && out.length) {
    out[out.length - 1].markLine = { silent: true, symbol: "none", animation: false,
      lineStyle: { color: "#555", type: "dashed" }, label: { formatter: `trained to ${trained}`, position: "insideEndTop" },
      data: [{ xAxis: trained }] };
  }
  $("#results-chart").dataset.trained = trained === null ? "" : String(trained);
  const fmt = (v) => (Math.abs(v) >= 100 ? v.toFixed(1) : v.toPrecision(3));
  // Log axes, where every value is above 0 (lengths that double read best on one).
  const positive = (f) => series.every((s) => s.points.every((p) => f(p) > 0));
  const logx = $("#results-logx").checked && numericX;
  const logy = $("#results-logy").checked;
  if (logx && !positive((p) => p.x)) { error.textContent = "log x needs every x above 0"; return; }
  if (logy && !positive((p) => Math.min(...p.values))) { error.textContent = "log y needs every value above 0"; return; }
  saveState();
  chart($("#results-chart")).setOption({
    animation: false,
    title: { text: `${request.y}${x ? ` by ${x}` : ""}, ${$("#results-file").selectedOptions[0]?.textContent || request.path}`,
      left: "center", textStyle: { fontSize: 13 } },
    color: series.map((s) => s.colour),
    legend: { top: 24, type: "scroll", data: series.map((s) => s.name) },
    tooltip: {
      trigger: "item",
      formatter: (q) => {
        const p = q.data && q.data.point;
        if (!p) return "";
        return `${q.seriesName}, ${x || ""} ${p.x === null ? "" : p.x}<br>${fmt(p.mean)} ± ${fmt(p.sd)} over ${p.values.length}` +
          `<br>each: ${p.values.map(fmt).join(", ")}`;
      },
    },
    grid: { left: 70, right: 30, top: 70, bottom: 60 },
    xAxis: numericX ? { type: logx ? "log" : "value", logBase: 2, name: x || "", nameLocation: "center", nameGap: 30, scale: true }
      : { type: "category", data: categories, name: x || "", nameLocation: "center", nameGap: 30 },
    yAxis: { type: logy ? "log" : "value", name: request.y, scale: true },
    series: out,
  }, true);
  $("#results-chart").dataset.drawn = String(Number($("#results-chart").dataset.drawn || 0) + 1);
}
$("#results-file").addEventListener("change", resultsFileChanged);
for (const id of ["#results-y", "#results-x", "#results-group", "#results-logx", "#results-logy"]) $(id).addEventListener("change", drawResults);

let LC_COLUMNS = [];
/** Preferred values of the long-context filters: SmolLM2's records, unscaled. */
const LC_PREFERRED = { experiment: '"smollm2-passkey"', scaling: '"none"' };

let lcRestored = false;
async function lcFileChanged() {
  const path = $("#lc-file").value;
  if (!path) return;
  // The address's filters on the first drawing only; the preferred ones after.
  let restored = null;
  if (!lcRestored && OPENED.lcf) {
    try { restored = JSON.parse(OPENED.lcf); } catch (e) { restored = null; }
  }
  lcRestored = true;
  try {
    LC_COLUMNS = await columnsOf(path);
    const box = $("#lc-filters");
    box.innerHTML = "";
    const facets = LC_COLUMNS.filter((c) => c.values && c.values.length > 1 &&
      !["length", "depth", "position", "seed", "key_seed", "trial", "correct", "key", "answer", "loss",
        "tokens", "windows"].includes(c.name) && c.values.every((v) => typeof v !== "number" || c.values.length <= 12));
    for (const c of facets) {
      const label = document.createElement("label");
      label.textContent = `${c.name} `;
      const select = document.createElement("select");
      select.dataset.column = c.name;
      select.add(new Option("(all)", ""));
      for (const v of c.values) select.add(new Option(String(v), JSON.stringify(v)));
      const offered = (v) => c.values.some((w) => JSON.stringify(w) === v);
      if (restored) {
        if (offered(restored[c.name])) select.value = restored[c.name];
      } else if (LC_PREFERRED[c.name] && offered(LC_PREFERRED[c.name])) {
        select.value = LC_PREFERRED[c.name];
      }
      select.addEventListener("change", drawLongContext);
      label.appendChild(select);
      box.appendChild(label);
    }
    await drawLongContext();
  } catch (e) { $("#lc-error").textContent = e.message; }
}

async function drawLongContext() {
  const error = $("#lc-error");
  error.textContent = "";
  saveState();
  const names = LC_COLUMNS.map((c) => c.name);
  const filter = {};
  for (const select of $$("#lc-filters select")) {
    if (select.value) filter[select.dataset.column] = JSON.parse(select.value);
  }
  const path = $("#lc-file").value;
  const element = $("#lc-chart");
  try {
    if (["length", "depth", "correct"].every((n) => names.includes(n))) {
      const series = await api("/api/aggregate", { path, y: "correct", x: "length", group: "depth", filter });
      const depths = series.map((s) => s.name).sort((a, b) => Number(a) - Number(b));
      const lengths = Array.from(new Set(series.flatMap((s) => s.points.map((p) => p.x)))).sort((a, b) => a - b);
      const values = depths.map((d) => {
        const s = series.find((t) => t.name === d);
        return lengths.map((l) => { const p = s.points.find((q) => q.x === l); return p ? p.mean : null; });
      });
      const counts = depths.map((d) => lengths.map((l) => {
        const p = series.find((t) => t.name === d).points.find((q) => q.x === l);
        return p ? `${p.values.filter((v) => v > 0.5).length}/${p.values.length}` : "";
      }));
      $("#lc-note").textContent = "Passkey retrieval: the fraction of keys found, by where the key sits (depth) and the prompt's length. Hover for found/trials.";
      heatmap(element, { title: `passkey found, ${path}${Object.keys(filter).length ? ` (${JSON.stringify(filter)})` : ""}`,
        rows: depths, columns: lengths, values, rowName: "depth", columnName: "length",
        colours: ["#b40426", "#f6bfa6", "#dddddd", "#a3c2f0", "#3b4cc0"], range: [0, 1], missing: "no data" });
      // Each cell says how many keys of how many were found, as the static grid does.
      chart(element).setOption({
        tooltip: { formatter: (p) =>
          `depth ${depths[p.value[1]]}, length ${lengths[p.value[0]]}: ` +
          (p.seriesIndex === 1 ? "no data" : `${counts[p.value[1]][p.value[0]]} found`) },
        series: [{ label: { show: true, fontSize: 14, formatter: (p) => counts[p.value[1]][p.value[0]] } }],
      });
    } else if (["task", "length", "score"].every((n) => names.includes(n))) {
      // RULER: the mean score by task and length.
      const series = await api("/api/aggregate", { path, y: "score", x: "length", group: "task", filter });
      const tasks = series.map((s) => s.name);
      const lengths = Array.from(new Set(series.flatMap((s) => s.points.map((p) => p.x)))).sort((a, b) => a - b);
      const cells = tasks.map((t) => lengths.map((l) => series.find((s) => s.name === t).points.find((q) => q.x === l)));
      $("#lc-note").textContent = "RULER: the share of the expected answers given, by task and length; each cell the mean over its samples and seeds ± their sd.";
      heatmap(element, { title: `RULER score, ${path}`, rows: tasks, columns: lengths,
        values: cells.map((row) => row.map((p) => (p ? p.mean : null))),
        rowName: "task", columnName: "length",
        colours: ["#b40426", "#f6bfa6", "#dddddd", "#a3c2f0", "#3b4cc0"], range: [0, 1], missing: "no data" });
      chart(element).setOption({
        series: [{ label: { show: true, fontSize: 13, formatter: (p) => {
          const c = cells[p.value[1]][p.value[0]];
          return c ? `${c.mean.toFixed(2)} ± ${c.sd.toFixed(2)}` : "";
        } } }],
      });
    } else if (["position", "loss"].every((n) => names.includes(n))) {
      const group = ["model", "label", "encoding"].find((n) => names.includes(n)) || null;
      const series = await api("/api/aggregate", { path, y: "loss", x: "position", group, filter });
      $("#lc-note").textContent = "Loss by position: how an encoding's loss climbs past the length it trained on.";
      chart(element).setOption({
        animation: false, title: { text: `loss by position, ${path}`, left: "center", textStyle: { fontSize: 13 } },
        legend: { top: 24, type: "scroll" }, tooltip: { trigger: "axis" },
        grid: { left: 70, right: 30, top: 70, bottom: 60 },
        xAxis: { type: "value", name: "position", nameLocation: "center", nameGap: 30 },
        yAxis: { type: "value", name: "loss", scale: true },
        series: series.map((s) => ({ name: s.name, type: "line", showSymbol: false, itemStyle: { color: s.colour },
          data: s.points.map((p) => [p.x, p.mean]) })),
      }, true);
    } else {
      $("#lc-note").textContent = "";
      throw new Error(`${path} has no passkey records (length, depth, correct), RULER records (task, length, score) or loss by position (position, loss)`);
    }
    element.dataset.drawn = String(Number(element.dataset.drawn || 0) + 1);
  } catch (e) { error.textContent = e.message; }
}
$("#lc-file").addEventListener("change", lcFileChanged);

// ---------------------------------------------------------------- start

initEncodings().catch((e) => { $(".error", $("#pane-a")).textContent = e.message; });
initModels().catch((e) => { $("#generate-error").textContent = e.message; });
