// Drives Debian's Chromium through the explorer page with playwright-core.
//
//   node tests/browser/explorer.mjs URL OUT_DIR
//
// Run by the Rust test `serve::explorer_in_chromium` (tests/serve.rs), which starts the
// server. Every check throws with what it saw; a screenshot of each view is saved in
// OUT_DIR. Prints one JSON line of measurements at the end.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [url, out] = process.argv.slice(2);
if (!url || !out) throw new Error("usage: explorer.mjs URL OUT_DIR");
mkdirSync(out, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const measured = {};
const consoleErrors = [];
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  // A 4xx answer is logged by Chromium as a failed resource: the checks below ask for some.
  page.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) consoleErrors.push(m.text());
  });
  page.setDefaultTimeout(30_000);
  await page.goto(url);

  const check = (ok, what) => { if (!ok) throw new Error(what); };
  /** How many pixels of the canvases under `selector` are not background. */
  const inked = (selector) => page.$$eval(`${selector} canvas`, (canvases) => canvases.reduce((sum, c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) {
      const [r, g, b, a] = [d[i], d[i + 1], d[i + 2], d[i + 3]];
      if (a > 0 && !(r > 245 && g > 245 && b > 245)) n++;
    }
    return sum + n;
  }, 0));
  const pixels = (selector) => page.$$eval(`${selector} canvas`, (canvases) =>
    canvases.map((c) => c.toDataURL()).join(""));
  const drawn = (selector) => page.$eval(selector, (e) => Number(e.dataset.drawn || 0));

  // ---- Encodings: both panes draw; a setting changes the heatmap; bad JSON is named.
  await page.waitForFunction(() => Number(document.querySelector("#pane-a").dataset.drawn || 0) >= 1
    && Number(document.querySelector("#pane-b").dataset.drawn || 0) >= 1);
  check(await inked("#pane-a .heatmap") > 1000, "pane A's heatmap is blank");
  // YaRN ×4 (pane B) lies off the unit circle, by its attention factor 0.1 ln 4 + 1, and says why.
  const pairsTitle = (pane) => page.$eval(`${pane} .pairs`, (e) => {
    const t = echarts.getInstanceByDom(e).getOption().title[0];
    return `${t.text} ${t.subtext || ""}`;
  });
  const factor = (0.1 * Math.log(4) + 1).toFixed(3);
  check((await pairsTitle("#pane-b")).includes(`radius ${factor}`), `pane B: ${await pairsTitle("#pane-b")}`);
  check(!(await pairsTitle("#pane-a")).includes("radius"), `pane A: ${await pairsTitle("#pane-a")}`);
  await page.screenshot({ path: `${out}/encodings.png`, fullPage: true });
  const before = await pixels("#pane-a .heatmap");
  const count = await drawn("#pane-a");
  await page.fill("#pane-a .config", JSON.stringify({ kind: "rope", base: 100 }));
  await page.waitForFunction((n) => Number(document.querySelector("#pane-a").dataset.drawn) > n, count);
  check(await pixels("#pane-a .heatmap") !== before, "changing rope's base left the heatmap as it was");
  // The redraw's time (fetch and drawing) at d_model 512 × 2 048 positions, five settings.
  measured.redraw_ms_512x2048 = [Number(await page.$eval("#pane-a", (e) => e.dataset.ms))];
  for (const base of [200, 500, 1000, 2000, 5000, 20000, 50000, 100000, 500000]) {
    const n = await drawn("#pane-a");
    await page.fill("#pane-a .config", JSON.stringify({ kind: "rope", base }));
    await page.waitForFunction((n) => Number(document.querySelector("#pane-a").dataset.drawn) > n, n);
    measured.redraw_ms_512x2048.push(Number(await page.$eval("#pane-a", (e) => e.dataset.ms)));
  }
  await page.fill("#pane-a .config", '{"kind": "rope", "base": }');
  await page.waitForFunction(() => /malformed JSON/.test(document.querySelector("#pane-a .error").textContent));
  await page.fill("#pane-a .config", '{"kind": "rop"}');
  await page.waitForFunction(() => /unknown encoding kind `rop`/.test(document.querySelector("#pane-a .error").textContent));
  await page.fill("#pane-a .config", '{"kind": "alibi"}');
  await page.waitForFunction(() => document.querySelector("#pane-a .error").textContent === "");
  // A bias has a matrix per head: picking another head redraws the heatmap.
  await page.waitForFunction(() => document.querySelector("#pane-a .head").options.length === 8);
  const head0 = await pixels("#pane-a .heatmap");
  await page.selectOption("#pane-a .head", "7");
  check(await pixels("#pane-a .heatmap") !== head0, "ALiBi's head 7 looks like its head 0");

  // ---- A kind of a grid: the query patch's interaction over the image; a click moves it.
  check(await page.$eval("#pane-a .grid-box", (e) => e.style.display === "none"), "ALiBi shows a grid view");
  let g = await drawn("#pane-a");
  await page.selectOption("#pane-a .kind", "rope-2d");
  await page.waitForFunction((n) => Number(document.querySelector("#pane-a").dataset.drawn) > n, g);
  check(await page.$eval("#pane-a .grid-box", (e) => e.style.display !== "none"), "RoPE-Axial shows no grid view");
  check(await inked("#pane-a .grid-map") > 1000, "the grid view is blank");
  const centre = await pixels("#pane-a .grid-map");
  g = await drawn("#pane-a");
  await page.fill("#pane-a .query-row", "1");
  await page.waitForFunction((n) => Number(document.querySelector("#pane-a").dataset.drawn) > n, g);
  check(await pixels("#pane-a .grid-map") !== centre, "moving the query patch left the grid view as it was");
  check(/query patch \(1, 4\)/.test(await page.$eval("#pane-a .grid-map", (e) =>
    echarts.getInstanceByDom(e).getOption().title[0].text)), "the grid view's title names another query");
  // M-RoPE: the layout of text, the image and text.
  g = await drawn("#pane-a");
  await page.selectOption("#pane-a .kind", "mrope");
  await page.waitForFunction((n) => Number(document.querySelector("#pane-a").dataset.drawn) > n, g);
  check(await inked("#pane-a .layout") > 500, "M-RoPE's layout is blank");
  await page.screenshot({ path: `${out}/grid.png`, fullPage: true });
  g = await drawn("#pane-a");
  await page.selectOption("#pane-a .kind", "alibi");
  await page.waitForFunction((n) => Number(document.querySelector("#pane-a").dataset.drawn) > n, g);
  check(await page.$eval("#pane-a .error", (e) => e.textContent) === "", "ALiBi after a grid kind failed");

  // ---- Every chart exports: a PNG and its data as CSV.
  const csv = await page.$eval("#pane-a .heatmap", (e) => window.csvOf(e));
  const lines = csv.trim().split("\n");
  check(lines[0] === "series,x,y,value" && lines.length > 10, `pane A's CSV: ${csv.slice(0, 200)}`);
  check(await page.$eval("#pane-a .heatmap", (e) => Boolean(echarts.getInstanceByDom(e).getOption().toolbox[0].feature.saveAsImage)),
    "pane A's chart has no PNG export");

  // ---- The address holds the view and its settings: opened again, it shows them.
  await page.fill("#d-model", "64");
  await page.waitForFunction(() => /d_model=64/.test(location.hash));
  const address = page.url();
  check(/"kind": ?"alibi"/.test(new URLSearchParams(new URL(address).hash.slice(1)).get("a") || ""),
    `the address lacks pane A's settings: ${address}`);
  const again = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await again.goto(address.replace("view=encodings", "view=attention"));
  await again.waitForFunction(() => Number(document.querySelector("#pane-a").dataset.drawn || 0) >= 1);
  check(await again.$eval("#pane-a .kind", (s) => s.value) === "alibi", "pane A's kind was not restored");
  check(await again.$eval("#d-model", (e) => e.value) === "64", "d_model was not restored");
  check(await again.$eval("#view-attention", (v) => v.classList.contains("active")), "the view was not restored");
  await again.close();

  // ---- Attention: the sentence translates, and the heads are drawn.
  await page.click('nav button[data-view="attention"]');
  // The shipped translator is offered first, and the shipped language model is the default.
  await page.waitForFunction(() => document.querySelector("#translator").options.length >= 1);
  check(await page.$eval("#translator", (s) => s.value) === "kotoba", "the shipped translator is not the default");
  check(await page.$eval("#lm", (s) => s.value) === "shakespeare-alibi", "the shipped language model is not the default");
  await page.fill("#sentence", "the dog chases the cat");
  await page.click("#translate");
  await page.waitForFunction(() => document.querySelector("#translation").textContent === "inu ga neko o oikakeru");
  await page.waitForFunction(() => Number(document.querySelector("#attention-grid").dataset.drawn || 0) >= 1);
  const heads = await page.$$eval("#attention-grid .cell", (cells) => cells.length);
  check(heads >= 2, `${heads} attention maps drawn`);
  check(await inked("#attention-grid") > 1000, "the attention canvases are blank");
  await page.fill("#sentence", "the zebra chases the cat");
  await page.click("#translate");
  await page.waitForFunction(() => /unknown word `zebra`/.test(document.querySelector("#translate-error").textContent));
  check(await page.$$eval("#attention-grid .cell", (cells) => cells.length) === 0,
    "a sentence that failed left the maps of the one before");
  await page.fill("#sentence", "the dog chases the cat");
  await page.click("#translate");
  await page.waitForFunction(() => document.querySelector("#translation").textContent === "inu ga neko o oikakeru");
  // A generation streams its tokens and draws its running map.
  await page.fill("#max-tokens", "12");
  await page.click("#generate");
  await page.waitForFunction(() => document.querySelector("#output-a").dataset.done === "true");
  check(await inked("#gen-map-a") > 500, "the generation's attention map is blank");
  await page.screenshot({ path: `${out}/attention.png`, fullPage: true });

  // ---- Results: a study's records, mean and spread over seeds.
  await page.click('nav button[data-view="results"]');
  await page.waitForFunction(() => Number(document.querySelector("#results-chart").dataset.drawn || 0) >= 1);
  check(await inked("#results-chart") > 1000, "the results chart is blank");
  await page.screenshot({ path: `${out}/results.png`, fullPage: true });
  // Another study on a log x axis; its address opens on the same view.
  let n = await drawn("#results-chart");
  await page.selectOption("#results-file", "docs/lengthgen/copy/results.json");
  await page.waitForFunction((n) => Number(document.querySelector("#results-chart").dataset.drawn) > n, n);
  n = await drawn("#results-chart");
  await page.check("#results-logx");
  await page.waitForFunction((n) => Number(document.querySelector("#results-chart").dataset.drawn) > n, n);
  check(await page.$eval("#results-chart", (e) => echarts.getInstanceByDom(e).getOption().xAxis[0].type) === "log",
    "log x drew no log axis");
  const study = page.url();
  const reopened = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await reopened.goto(study);
  await reopened.waitForFunction(() => Number(document.querySelector("#results-chart").dataset.drawn || 0) >= 1);
  check(await reopened.$eval("#results-file", (s) => s.value) === "docs/lengthgen/copy/results.json",
    `the study was not restored from ${study}`);
  check(await reopened.$eval("#results-logx", (c) => c.checked), "log x was not restored");
  // The studies are listed by name, not by file; the chart by length marks the trained length
  // (copy trains to 20, lengthgen's default).
  const named = await reopened.$eval("#results-file", (s) => s.selectedOptions[0].textContent);
  check(named === "docs/lengthgen/copy", `the study is listed as ${named}`);
  const trained = await reopened.$eval("#results-chart", (e) => e.dataset.trained);
  check(trained !== "" && Number(trained) > 0, `no trained length marked (${trained})`);
  check(await reopened.$eval("#view-results", (v) => v.classList.contains("active")), "the results view was not restored");
  await reopened.close();

  // ---- Long context: the passkey grid.
  await page.click('nav button[data-view="long-context"]');
  await page.waitForFunction(() => Number(document.querySelector("#lc-chart").dataset.drawn || 0) >= 1);
  check(await inked("#lc-chart") > 1000, "the long-context chart is blank");
  // The title sits above the cells, not over them, and a cell no record holds says so.
  const lc = await page.$eval("#lc-chart", (e) => {
    const c = echarts.getInstanceByDom(e);
    const o = c.getOption();
    // ECharts draws the title's text into its view's group: its box is the title's extent.
    const view = c._componentsViews.find((v) => v.type === "title");
    const box = view.group.getBoundingRect();
    const titleBottom = view.group.y + box.y + box.height;
    return { gridTop: o.grid[0].top, titleBottom, absent: o.series[1].data.length };
  });
  check(lc.titleBottom < lc.gridTop, `the title (${lc.titleBottom} px) runs into the cells (from ${lc.gridTop} px)`);
  check(lc.absent > 0, "the passkey grid's missing cells are not marked");
  // And drawn, in grey: the empty cell at depth 0.9, length 32 768 is no longer background.
  const grey = await page.$eval("#lc-chart canvas", (c) => {
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] === 0xee && d[i + 1] === 0xee && d[i + 2] === 0xee) n++;
    return n;
  });
  check(grey > 1000, `the missing cells are not drawn grey (${grey} px)`);
  await page.screenshot({ path: `${out}/long-context.png`, fullPage: true });
  // RULER's records: a grid by task and length.
  const before_ruler = await drawn("#lc-chart");
  await page.selectOption("#lc-file", "docs/long-context/ruler/results.json");
  await page.waitForFunction((n) => Number(document.querySelector("#lc-chart").dataset.drawn) > n, before_ruler);
  check(/RULER/.test(await page.textContent("#lc-note")), "the RULER records were not drawn as RULER's grid");
  check(await inked("#lc-chart") > 1000, "the RULER grid is blank");
  // A filter chosen there comes back with its address.
  const filter = await page.$eval("#lc-filters select", (s) => ({ column: s.dataset.column,
    value: Array.from(s.options).map((o) => o.value).filter((v) => v && v !== s.value)[0] }));
  let before_filter = await drawn("#lc-chart");
  await page.selectOption(`#lc-filters select[data-column="${filter.column}"]`, filter.value);
  await page.waitForFunction((n) => Number(document.querySelector("#lc-chart").dataset.drawn) > n, before_filter);
  const filtered = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  await filtered.goto(page.url());
  await filtered.waitForFunction(() => Number(document.querySelector("#lc-chart").dataset.drawn || 0) >= 1);
  const kept = await filtered.$eval(`#lc-filters select[data-column="${filter.column}"]`, (s) => s.value);
  check(kept === filter.value, `the filter ${filter.column}=${filter.value} came back as ${kept}`);
  await filtered.close();

  // At 700 px the page holds: no view runs wider than the window, and the panes stack.
  const narrow = await browser.newPage({ viewport: { width: 700, height: 900 } });
  for (const view of ["encodings", "attention", "results", "long-context"]) {
    await narrow.goto(`${url}#view=${view}`);
    await narrow.waitForTimeout(300);
    const wide = await narrow.evaluate(() => document.documentElement.scrollWidth);
    check(wide <= 700, `the ${view} view is ${wide} px wide in a 700 px window`);
  }
  await narrow.goto(url);
  await narrow.waitForFunction(() => Number(document.querySelector("#pane-b").dataset.drawn || 0) >= 1);
  const stacked = await narrow.evaluate(() =>
    document.querySelector("#pane-b").getBoundingClientRect().top >= document.querySelector("#pane-a").getBoundingClientRect().bottom);
  check(stacked, "the two panes do not stack at 700 px");
  await narrow.screenshot({ path: `${out}/narrow.png`, fullPage: true });
  await narrow.close();

  check(consoleErrors.length === 0, `the page logged errors: ${consoleErrors.join("; ")}`);
} catch (e) {
  // A script error on the page shows as a wait that timed out: say what the page logged.
  e.message += consoleErrors.length ? `\nthe page logged: ${consoleErrors.join("; ")}` : "";
  throw e;
} finally {
  await browser.close();
}
console.log(JSON.stringify(measured));
