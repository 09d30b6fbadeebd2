// Browser half of bench/dashboard: opens the dashboard's grid and heat map in Debian's
// headless Chromium (through playwright-core from web-tests/, no browser download) and
// prints one JSON document of timings and memory on stdout.
//
//   node bench/dashboard-browser.mjs URL TOKEN REPEATS
//
// Each repeat: a fresh browser context signs in with URL/#token=TOKEN (which lands on
// #/grid); when the first grid is painted the page is measured and closed; then a fresh
// page of the same signed-in context opens URL/#/heatmap and is measured the same way.
// Every wait is bounded; the browser is closed whatever happens.
import { readdirSync, readFileSync } from 'node:fs';

const [url, token, repeatsText] = process.argv.slice(2);
if (!url || !token) {
  console.error('usage: node bench/dashboard-browser.mjs URL TOKEN [REPEATS]');
  process.exit(2);
}
const REPEATS = Number(repeatsText ?? 3);
const WAIT_MS = 60_000;
const { chromium } = await import(new URL('../web-tests/node_modules/playwright-core/index.mjs', import.meta.url));

// The app marks `vantage:*-drawn` right after drawing its canvas (same task); this
// wrapper adds `NAME:painted` once the frame holding that drawing has been produced
// (the task after the next animation frame).
const PAINTED = () => {
  const mark = performance.mark.bind(performance);
  performance.mark = (name, options) => {
    const entry = mark(name, options);
    if (name.startsWith('vantage:') && !name.endsWith(':painted')) {
      requestAnimationFrame(() => setTimeout(() => mark(`${name}:painted`), 0));
    }
    return entry;
  };
};

// Memory of the whole browser: every process below this one (Chromium and its
// renderers, GPU and utility processes). PSS shares each shared page among the
// processes mapping it (also other programs' Chromium: the figure drops while another
// browser runs); RSS counts shared pages once per process (an overcount). The page's
// own process is taken to be the largest renderer (besides it: a spare renderer and
// the browser UI's WebUI renderer; one page is open when measured).
function browserMemory() {
  const parent = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parent.set(Number(entry), Number(fields[1]));
    } catch { /* gone meanwhile */ }
  }
  const mine = (pid) => {
    for (let p = parent.get(pid); p; p = parent.get(p)) if (p === process.pid) return true;
    return false;
  };
  let pss = 0;
  let rss = 0;
  let processes = 0;
  let rendererPss = 0;
  for (const pid of parent.keys()) {
    if (!mine(pid)) continue;
    try {
      const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
      const own = Number(rollup.match(/^Pss:\s+(\d+) kB/m)?.[1] ?? 0) * 1024;
      pss += own;
      const command = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (command.includes('--type=renderer') && !command.includes('--top-chrome-webui')) {
        rendererPss = Math.max(rendererPss, own);
      }
      rss += Number(rollup.match(/^Rss:\s+(\d+) kB/m)?.[1] ?? 0) * 1024;
      processes += 1;
    } catch { /* gone meanwhile */ }
  }
  return { pss, rss, processes, renderer_pss: rendererPss };
}

async function measure(context, page, { mark, api, navigate }) {
  await page.goto(navigate, { waitUntil: 'load', timeout: WAIT_MS });
  const outcome = await page.waitForFunction((name) => {
    if (performance.getEntriesByName(`${name}:painted`).length > 0) return 'painted';
    const error = document.querySelector('p.error, #sign-in-error:not(:empty)');
    return error ? `error: ${error.textContent}` : false;
  }, mark, { timeout: WAIT_MS, polling: 50 }).then((handle) => handle.jsonValue());
  if (outcome !== 'painted') throw new Error(`${navigate}: ${outcome}`);
  const timings = await page.evaluate(({ mark, api }) => {
    const at = (name) => performance.getEntriesByName(name)[0]?.startTime ?? null;
    const resource = performance.getEntriesByType('resource').find((entry) => entry.name.includes(api));
    return {
      drawn_ms: at(mark),
      painted_ms: at(`${mark}:painted`),
      fcp_ms: at('first-contentful-paint'),
      api: resource ? {
        start_ms: resource.startTime,
        response_start_ms: resource.responseStart,
        response_end_ms: resource.responseEnd,
        transfer_bytes: resource.transferSize,
        encoded_bytes: resource.encodedBodySize,
        decoded_bytes: resource.decodedBodySize,
      } : null,
      dom_elements: document.getElementsByTagName('*').length,
      summary: (document.getElementById('grid-summary') ?? document.querySelector('#view > p'))?.textContent ?? '',
    };
  }, { mark, api });
  const cdp = await context.newCDPSession(page);
  await cdp.send('Performance.enable');
  const { metrics } = await cdp.send('Performance.getMetrics');
  const metric = Object.fromEntries(metrics.map(({ name, value }) => [name, value]));
  const atPaint = browserMemory();
  // What the page keeps: the same after a full garbage collection (the JSON text,
  // parse temporaries and the canvas's pixel buffer are garbage by now).
  await cdp.send('HeapProfiler.enable');
  await cdp.send('HeapProfiler.collectGarbage');
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const afterGc = browserMemory();
  await cdp.detach();
  return {
    ...timings,
    js_heap_used: metric.JSHeapUsedSize,
    js_heap_total: metric.JSHeapTotalSize,
    nodes: metric.Nodes,
    browser: atPaint,
    renderer_pss_after_gc: afterGc.renderer_pss,
  };
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_BIN ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox'], // run as root, where Chromium's sandbox refuses to start
  timeout: 30_000,
});
// Whatever happens: close the browser, with a bound; the caller kills this process
// group if even that hangs.
const watchdog = setTimeout(() => { console.error('dashboard-browser: overall timeout'); process.exit(3); }, (REPEATS * 2 + 1) * WAIT_MS);
const runs = [];
try {
  // For scale: the browser with one blank page.
  const blank = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await (await blank.newPage()).goto('about:blank');
  const baseline = browserMemory();
  await blank.close();
  for (let repeat = 0; repeat < REPEATS; repeat++) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    try {
      await context.addInitScript(PAINTED);
      const gridPage = await context.newPage();
      const grid = await measure(context, gridPage, {
        mark: 'vantage:grid-drawn', api: '/api/v1/grid', navigate: `${url}/#token=${encodeURIComponent(token)}`,
      });
      await gridPage.close();
      const heatPage = await context.newPage();
      const heatmap = await measure(context, heatPage, {
        mark: 'vantage:heatmap-drawn', api: '/api/v1/health/matrix?layout=columns', navigate: `${url}/#/heatmap`,
      });
      await heatPage.close();
      runs.push({ grid, heatmap });
    } finally {
      await context.close();
    }
  }
  console.log(JSON.stringify({ chromium: browser.version(), baseline, runs }));
} finally {
  await browser.close();
  clearTimeout(watchdog);
}
