// The dashboard in headless Chromium against `vantage demo` (three agents on
// loopback measuring each other): sign in through the link the demo prints, open
// every view, check what it shows against the API, follow a grid cell to the pair
// explorer, and watch a live update arrive without a reload.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { api, launchBrowser, screenshot, startDemo, waitFor } from './harness.mjs';

let demo;
let browser;
let page;
// Every error the page throws or logs fails the test that was running.
const pageErrors = [];

before(async () => {
  demo = await startDemo({ agents: 3, latencyEvery: '3s', throughputEvery: '20s' });
  // Enough latency results for each pair to have a value, before any view opens.
  await waitFor('a latency result of every demo pair', async () => {
    const grid = await api(demo, '/api/v1/grid?metric=rtt_median_us');
    return grid.cells.client.length >= 3;
  });
  ({ browser, page } = await launchBrowser({ width: 1280, height: 800 }));
  page.on('pageerror', (error) => pageErrors.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') pageErrors.push(`console error: ${message.text()}`);
  });
});

after(async () => {
  await browser?.close();
  await demo?.stop();
});

function assertNoPageErrors() {
  // Taken, so that one test's errors are not blamed on the next.
  assert.deepEqual(pageErrors.splice(0), [], 'the page reported errors');
}

// How the dashboard writes a delay (3 significant digits, µs below 1 ms).
const delay = (us) => (us >= 1000 ? `${(us / 1000).toPrecision(3)} ms` : `${us.toPrecision(3)} µs`);

test('the sign-in link the demo prints signs in read-only and leaves no token in the address bar', async () => {
  assert.match(demo.dashboardLink, /^http:\/\/127\.0\.0\.1:\d+\/#token=[0-9a-f]{64}$/);
  await page.goto(demo.dashboardLink);
  await page.waitForSelector('#grid-summary');
  assert.equal(await page.textContent('#who'), 'demo-reader (read-only)');
  assert.equal(new URL(page.url()).hash, '#/grid');
  assert.ok(!page.url().includes(demo.readerToken));
  // The session is a cookie the page's scripts cannot read.
  const cookies = await page.context().cookies();
  const session = cookies.find((cookie) => cookie.name === 'vantage_session');
  assert.ok(session?.httpOnly, 'HttpOnly session cookie');
  assert.equal(session.sameSite, 'Strict');
  assert.equal(await page.evaluate(() => document.cookie), '');
  assertNoPageErrors();
});

test('the mesh grid shows each pair with the value and state the API gives', async () => {
  await page.goto(`${demo.url}/#/grid`);
  await page.waitForSelector('canvas.matrix');
  // The summary counts what the API counts (read both until one result does not
  // fall between them: a new result may land at any time).
  await waitFor('the grid summary to match /api/v1/grid', async () => {
    const grid = await api(demo, '/api/v1/grid?metric=rtt_median_us&hysteresis=3');
    const summary = await page.textContent('#grid-summary');
    const ok = grid.cells.state.filter((state) => state === 'ok').length;
    return summary.startsWith(`${grid.agents.length} agents, ${grid.cells.client.length} measured pairs: ${ok} ok`);
  }, { timeoutMs: 20000 });
  // Keyboard: focusing the matrix describes its first pair, agent-1 → agent-2.
  await page.focus('canvas.matrix');
  const described = await waitFor('the focused cell to read as the API says', async () => {
    const grid = await api(demo, '/api/v1/grid?metric=rtt_median_us&hysteresis=3');
    const names = grid.agents.map((agent) => agent.name);
    const index = grid.cells.client.findIndex((client, i) => names[client] === 'agent-1' && names[grid.cells.server[i]] === 'agent-2');
    const text = await page.textContent('.details');
    const expected = `agent-1 → agent-2: ${delay(grid.cells.value[index])} (${grid.cells.state[index]}`;
    return text.includes(expected) ? text : null;
  }, { timeoutMs: 20000 });
  assert.match(described, /agent-2 → agent-1: (no result|[\d.]+ (µs|ms))/);
  // A new result redraws the grid; the keyboard focus stays on the matrix.
  await page.$eval('#grid-summary', (node) => { node.dataset.before = 'reload'; });
  await waitFor('a live redraw of the grid', async () => (await page.$('#grid-summary[data-before]')) === null, { timeoutMs: 20000 });
  assert.ok(await page.evaluate(() => document.activeElement?.matches('canvas.matrix')), 'the matrix keeps the focus');
  await page.keyboard.press('ArrowDown');
  assert.equal(await page.textContent('.details'), 'agent-2 (itself)');
  await page.keyboard.press('ArrowRight');
  assert.match(await page.textContent('.details'), /^agent-2 → agent-3: /);
  // The cells are painted in the state's colour: agent-1 → agent-2 is the upper-left
  // triangle of row 0, column 1 (its reverse the lower-right one); the pixel is off
  // the hatching a stale cell would have.
  const colours = { ok: [0, 114, 178], warning: [230, 159, 0], critical: [213, 94, 0], unknown: [217, 217, 217] };
  await waitFor('the cell agent-1 → agent-2 painted in its state\'s colour', async () => {
    const grid = await api(demo, '/api/v1/grid?metric=rtt_median_us&hysteresis=3');
    const names = grid.agents.map((agent) => agent.name);
    const index = grid.cells.client.findIndex((client, i) => names[client] === 'agent-1' && names[grid.cells.server[i]] === 'agent-2');
    const expected = colours[index < 0 ? 'unknown' : grid.cells.state[index]];
    const pixel = await page.$eval('canvas.matrix', (canvas) => {
      const ratio = window.devicePixelRatio || 1;
      const [cell, labels] = [Number(canvas.dataset.cellSize), Number(canvas.dataset.labelSize)];
      const at = (css) => Math.round(css * ratio);
      return [...canvas.getContext('2d').getImageData(at(labels + cell + 3), at(labels + 1), 1, 1).data].slice(0, 3);
    });
    return pixel.join() === expected.join();
  }, { timeoutMs: 20000 });
  // Grouping offers the agents' tags (the demo tags each agent role=demo).
  const groups = await page.$$eval('#grid-group option', (options) => options.map((option) => option.value));
  assert.equal(groups[0], '');
  assert.ok(groups.includes('role'), `group options: ${groups}`);
  await page.focus('canvas.matrix');
  await screenshot(page, 'grid');
  // Enter opens the focused pair.
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => location.hash === '#/pair/agent-2/agent-3');
  assertNoPageErrors();
});

test('a grid cell opens the pair explorer with its charts and latest results', async () => {
  await page.goto(`${demo.url}/#/grid`);
  const canvas = await page.waitForSelector('canvas.matrix');
  const box = await canvas.boundingBox();
  const cell = Number(await canvas.getAttribute('data-cell-size'));
  const labels = Number(await canvas.getAttribute('data-label-size'));
  // Row agent-1 (0), column agent-3 (2): the cell's upper-left triangle.
  await page.mouse.click(box.x + labels + 2 * cell + cell / 4, box.y + labels + cell / 4);
  await page.waitForFunction(() => location.hash === '#/pair/agent-1/agent-3');
  await page.waitForSelector('#pair-latest');
  assert.equal(await page.textContent('h1'), 'agent-1 ⇄ agent-3');
  // The RTT chart has a line of agent-1 → agent-3's buckets.
  await page.waitForSelector('.chart[data-metric="rtt_median_us"] polyline.line-forward', { state: 'attached' });
  const latest = await api(demo, '/api/v1/results?client=agent-1&server=agent-3&limit=10');
  const shownTests = await page.$$eval('#pair-latest tbody tr td:nth-child(2)', (cells) => cells.map((c) => c.textContent));
  assert.ok(shownTests.length > 0);
  assert.ok(shownTests.every((name) => ['latency', 'throughput'].includes(name)), shownTests.join());
  assert.ok(latest.results.length > 0);
  // The event strip and the per-stream bandwidth ECDF share the time range.
  assert.match(await page.textContent('#pair-events h3'), /^Alerts, path changes and SLA verdicts \(\d+\)$/);
  assert.match(await page.textContent('#pair-ecdf h3'), /^Per-stream bandwidth, ECDF \(\d+ stream intervals of \d+ throughput runs\)$/);
  await screenshot(page, 'pair-explorer', { fullPage: true });
  assertNoPageErrors();
});

test('the pair explorer updates live, without a reload', async () => {
  await page.goto(`${demo.url}/#/pair/agent-1/agent-2`);
  await page.waitForSelector('#pair-latest');
  await page.evaluate(() => { window.notReloaded = true; });
  const first = await page.textContent('#pair-latest tbody tr:first-child');
  // A latency run every 3 s: a new newest row arrives through the event stream.
  await waitFor('a new result row', async () => (await page.textContent('#pair-latest tbody tr:first-child')) !== first, { timeoutMs: 30000 });
  assert.equal(await page.evaluate(() => window.notReloaded), true, 'the page was not reloaded');
  assert.equal(await page.textContent('#live'), '● live');
  assertNoPageErrors();
});

test('the agents view lists every registered agent as alive', async () => {
  await page.goto(`${demo.url}/#/agents`);
  await page.waitForSelector('#agents tbody tr');
  const { agents } = await api(demo, '/api/v1/agents');
  const shown = await page.$$eval('#agents tbody tr', (rows) => rows.map((row) => [row.dataset.agent, row.children[1].textContent, row.children[2].textContent]));
  assert.deepEqual(shown.map(([name]) => name).sort(), agents.map((agent) => agent.name).sort());
  for (const [name, liveness, version] of shown) {
    assert.match(liveness, /alive/, name);
    const agent = agents.find((candidate) => candidate.name === name);
    assert.match(agent.version, /^\d+\.\d+\.\d+/);
    assert.equal(version, agent.version, name);
  }
  await screenshot(page, 'agents');
  assertNoPageErrors();
});

test('the schedule shows upcoming runs of the configured tasks', async () => {
  await page.goto(`${demo.url}/#/schedule`);
  await page.waitForSelector('#schedule-upcoming');
  const tasks = await page.$$eval('#schedule-upcoming tbody tr td:nth-child(2)', (cells) => cells.map((c) => c.textContent));
  assert.ok(tasks.length > 0, 'upcoming runs');
  assert.ok(tasks.every((task) => ['latency-mesh', 'throughput-mesh'].includes(task)), tasks.join());
  await screenshot(page, 'schedule');
  assertNoPageErrors();
});

test('the heat map says how many pairs have a health score', async () => {
  await page.goto(`${demo.url}/#/heatmap`);
  await page.waitForSelector('#heatmap-hosts');
  const matrix = await api(demo, '/api/v1/health/matrix');
  const scored = matrix.pairs.filter((pair) => pair.score !== null).length;
  assert.match(await page.textContent('main'), new RegExp(`${scored} of ${matrix.pairs.length} pairs scored`));
  assertNoPageErrors();
});

test('the alerts view shows a published alert as it arrives', async () => {
  await page.goto(`${demo.url}/#/alerts`);
  await page.waitForSelector('#alerts');
  const message = `browser test alert ${Date.now()}`;
  await api(demo, '/api/v1/alerts', {
    token: demo.adminToken,
    method: 'POST',
    body: { severity: 'critical', message, agents: ['agent-1', 'agent-2'], tags: {}, time: new Date().toISOString() },
  });
  await page.waitForSelector(`#alerts tbody tr:has-text("${message}")`, { timeout: 15000 });
  const { alerts } = await api(demo, '/api/v1/alerts?severity=critical&limit=1');
  assert.equal(alerts[0].message, message);
  const row = await page.textContent(`#alerts tbody tr:has-text("${message}")`);
  assert.match(row, /critical/);
  assert.match(row, /agent-1 → agent-2/);
  await screenshot(page, 'alerts');
  assertNoPageErrors();
});

test('a reader cannot start a diagnosis; an admin starts one and reads its verdict', async () => {
  await page.goto(`${demo.url}/#/diagnose`);
  await page.waitForSelector('#diagnose-form');
  assert.ok(await page.$('#diagnose-read-only'), 'says why it is read-only');
  assert.equal(await page.$eval('#diagnose-form button[type=submit]', (button) => button.disabled), true);

  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const admin = await context.newPage();
  try {
    await admin.goto(`${demo.url}/#token=${demo.adminToken}`);
    await admin.waitForSelector('#grid-summary');
    await admin.evaluate(() => { location.hash = '#/diagnose'; });
    await admin.waitForSelector('#diagnose-form');
    await admin.selectOption('#source', 'agent-1');
    await admin.selectOption('#destination', 'agent-2');
    // End to end only: each segment's bundle would add half a minute.
    await admin.uncheck('#diagnose-segments');
    await admin.click('#diagnose-form button[type=submit]');
    await admin.waitForFunction(() => location.hash.startsWith('#/diagnose/diag-'));
    const id = decodeURIComponent((await admin.evaluate(() => location.hash)).slice('#/diagnose/'.length));
    // Its steps arrive live; the bundle takes about half a minute on loopback.
    await admin.waitForSelector('#diagnosis-verdict, #diagnosis-state:has-text("failed")', { timeout: 180000 });
    const job = await api(demo, `/api/v1/diagnose/${id}`);
    assert.equal(job.state, 'done', job.error);
    assert.match(await admin.textContent('#diagnosis-verdict'), new RegExp(`^\\S+ ${job.result.verdict}`));
    const progress = await admin.$$eval('#diagnosis-progress li', (items) => items.map((item) => item.textContent));
    assert.deepEqual(progress, job.progress);
    const runs = await admin.$$eval('#diagnosis-runs tbody tr td:nth-child(3)', (cells) => cells.map((cell) => cell.textContent));
    assert.deepEqual(runs, job.result.tests_run.map((run) => run.run_id));
    await screenshot(admin, 'diagnosis', { fullPage: true });
  } finally {
    await context.close();
  }
  assertNoPageErrors();
});

test('a phone-width screen shows the grid without sideways scrolling of the page', async () => {
  const { browser: phoneBrowser, page: phone } = await launchBrowser({ width: 390, height: 844 });
  try {
    await phone.goto(demo.dashboardLink);
    await phone.waitForSelector('canvas.matrix');
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than the screen`);
    await screenshot(phone, 'grid-phone', { fullPage: true });
  } finally {
    await phoneBrowser.close();
  }
});

test('a wrong token is refused with a message; an admin link signs in as admin', async () => {
  const context = await browser.newContext();
  const fresh = await context.newPage();
  try {
    await fresh.goto(`${demo.url}/`);
    await fresh.fill('#token', 'not-a-token');
    await fresh.click('#sign-in button');
    await fresh.waitForFunction(() => document.getElementById('sign-in-error').textContent !== '');
    assert.equal(await fresh.textContent('#sign-in-error'), 'unknown or revoked bearer token');
    await fresh.fill('#token', demo.adminToken);
    await fresh.click('#sign-in button');
    await fresh.waitForSelector('#grid-summary');
    assert.match(await fresh.textContent('#who'), /^admin.* \(admin\)$/);
  } finally {
    await context.close();
  }
});
