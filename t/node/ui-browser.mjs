// Drives the playground page (pagedllm_ui) in headless Chromium through
// playwright-core, for t/60-ui-browser.t.
//
//   node ui-browser.mjs CHROMIUM SHOTS_DIR NAME=URL...
//
// For each page: load it, wait for the model picker to fill from
// /v1/models, run a long greedy completion (ignore EOS) and record every
// change of the output's text with its time, the block map's used blocks
// while it runs and after it ends, the shown TTFT and tokens/s, and the
// protocol the API call went over; then start another and press Stop, and
// record the map after the abort.  The first page asks for n = 2 (two
// sequences sharing the prompt's blocks), runs a second request beside
// it, and is photographed while both run (SHOTS_DIR/ui-playground.png,
// SHOTS_DIR/ui-blockmap.png); the second is aborted before the checks.
// Prints one JSON object per page.

import { chromium } from "playwright-core";

const [exe, shots, ...pages] = process.argv.slice(2);
// bounds on waiting, in ms, times PAGEDLLM_TEST_TIME_SCALE (make
// test-sanitize: its engine and nginx run several times slower)
const scale = Number(process.env.PAGEDLLM_TEST_TIME_SCALE) || 1;
const ms = (n) => n * scale;

async function mapUsed(page, cond, timeout) {
  const deadline = Date.now() + ms(timeout);
  for (;;) {
    const used = await page.$eval("#map", (m) => +m.dataset.used);
    if (cond(used) || Date.now() > deadline) return used;
    await page.waitForTimeout(50);
  }
}

async function sendLong(page, maxTokens) {
  await page.fill("#max_tokens", String(maxTokens));
  await page.click("#send");
  return mapUsed(page, (u) => u > 0, 20000);
}

// A second request beside the page's, so the map shows two owners; runs
// in the page (its `api`), aborted after the screenshots.
function startNeighbour() {
  window.neighbour = new AbortController();
  fetch(api + "/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    signal: window.neighbour.signal,
    body: JSON.stringify({ prompt: "A second request beside it",
                           max_tokens: 1800, ignore_eos: true,
                           stream: true }),
  }).then((r) => r.text()).catch(() => {});
}

async function run(browser, name, url, shoot) {
  const page = await browser.newPage({
    viewport: { width: 1100, height: 640 } });
  const r = { name, url };
  await page.goto(url);
  await page.waitForFunction(
    () => document.querySelectorAll("#model option").length > 0, null,
    { timeout: ms(15000) });
  r.model = await page.$eval("#model", (s) => s.value);
  await page.check("input[name=mode][value=completion]");
  await page.fill("#temperature", "0");
  await page.check("#ignore_eos");
  await page.fill("#prompt", "Once upon a time, in a paged cache,");
  await page.evaluate(() => {
    window.updates = [];
    new MutationObserver(() => {
      const n = document.getElementById("outs").textContent.length;
      const u = window.updates;
      if (n > 0 && (u.length === 0 || u[u.length - 1].len !== n))
        u.push({ t: performance.now(), len: n });
    }).observe(document.getElementById("outs"),
               { subtree: true, childList: true, characterData: true });
  });

  if (shoot) {
    await page.fill("#n", "2");
    await page.evaluate(startNeighbour);
  }
  r.used_during = await sendLong(page, 1800);
  await page.waitForFunction(() => document.getElementById("owners")
    .textContent.includes("this page's request"), null,
    { timeout: ms(2000) })
    .catch(() => {});
  r.owners = await page.$eval("#owners", (o) => o.textContent);
  r.mine_listed = r.owners.includes("this page's request");
  if (shoot) {
    await mapUsed(page, (u) => u >= 40, 5000);
    await page.waitForFunction(
      () => document.getElementById("out-0").textContent.length > 0, null,
      { timeout: ms(5000) }).catch(() => {});
    await page.screenshot({ path: shots + "/ui-playground.png" });
    await page.locator("#kv").screenshot({ path: shots + "/ui-blockmap.png" });
    await page.evaluate(() => window.neighbour.abort());
  }
  const u0 = await page.$eval("#map", (m) => +m.dataset.updates);
  const t0 = Date.now();
  await page.waitForTimeout(1500);
  r.map_updates_per_s = ((await page.$eval("#map", (m) => +m.dataset.updates))
                         - u0) * 1000 / (Date.now() - t0);
  await page.waitForFunction(() => !document.getElementById("send").disabled,
                             null, { timeout: ms(120000) });
  r.used_after_end = await mapUsed(page, (u) => u === 0, 5000);
  r.updates = await page.evaluate(() => window.updates);
  r.text_len = await page.$eval("#out-0", (o) => o.textContent.length);
  r.ttft = await page.$eval("#ttft", (e) => e.textContent);
  r.tps = await page.$eval("#tps", (e) => e.textContent);
  r.ntok = await page.$eval("#ntok", (e) => +e.textContent);
  r.error = await page.$eval("#err", (e) => e.textContent);
  r.protocols = await page.evaluate(() => performance
    .getEntriesByType("resource").filter((e) => /completions$/.test(e.name))
    .map((e) => e.nextHopProtocol));
  r.page_protocol = await page.evaluate(
    () => performance.getEntriesByType("navigation")[0].nextHopProtocol);

  r.used_before_abort = await sendLong(page, 2000);
  await page.click("#stop");
  r.used_after_abort = await mapUsed(page, (u) => u === 0, 5000);
  r.error_after_abort = await page.$eval("#err", (e) => e.textContent);
  await page.close();
  return r;
}

const browser = await chromium.launch({
  executablePath: exe,
  args: ["--no-sandbox", "--ignore-certificate-errors", "--disable-gpu",
         "--disable-dev-shm-usage"],
});
try {
  let first = true;
  for (const p of pages) {
    const k = p.indexOf("=");
    const r = await run(browser, p.slice(0, k), p.slice(k + 1), first)
      .catch((e) => ({ name: p.slice(0, k), failed: String(e) }));
    console.log(JSON.stringify(r));
    first = false;
  }
} finally {
  await browser.close();
}
