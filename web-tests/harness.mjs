// Harness for the dashboard's browser tests: a `vantage demo` to test against, a
// small API client, bounded polling, and headless Chromium (Debian's, through
// playwright-core: no browser download). Tests run one at a time (scripts/test
// passes --test-concurrency=1), each with its own demo on a free port.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const repoRoot = fileURLToPath(new URL('..', import.meta.url));

const STARTUP_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;
const FETCH_TIMEOUT_MS = 30_000;

// Process groups of the demos still running. Whatever a test does (throws, forgets
// stop(), is interrupted), they are killed when this process ends.
const running = new Set();

function killGroup(pgid, signal) {
  try {
    process.kill(-pgid, signal);
  } catch (error) {
    if (error.code !== 'ESRCH') throw error;
  }
}

let handlersInstalled = false;
function installCleanupHandlers() {
  if (handlersInstalled) return;
  handlersInstalled = true;
  // 'exit' handlers must be synchronous: SIGKILL, no waiting.
  process.on('exit', () => {
    for (const pgid of running) killGroup(pgid, 'SIGKILL');
  });
  // A listener replaces Node's default of dying at once, so exit as it would have;
  // process.exit runs the 'exit' handler above.
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, () => process.exit(128 + constants.signals[signal]));
  }
}

// `promise`, bounded: rejects with `message` if it has not settled within `ms`. The
// timer is cleared either way, so a settled wait never holds this process open.
async function within(ms, message, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts `vantage demo` (server on SQLite, agents on loopback) on a free port and
 * resolves once it has printed its URL and tokens.
 * @returns {Promise<{url: string, dashboardLink: string, adminToken: string, readerToken: string,
 *   stop: () => Promise<void>, output: () => string}>}
 */
export async function startDemo({
  agents = 3,
  // The shortest period the demo's latency test allows: each run reserves 2.4 s, and
  // the server refuses a period shorter than that (so '2s' is refused).
  latencyEvery = '3s',
  throughputEvery = '30s',
  extraArgs = [],
} = {}) {
  const bin = process.env.VANTAGE_BIN ?? join(repoRoot, 'target/release/vantage');
  if (!existsSync(bin)) {
    throw new Error(`no vantage binary at ${bin}: build it (cargo build --release --bin vantage) or set VANTAGE_BIN`);
  }
  const args = [
    'demo', '--listen', '127.0.0.1:0', '--agents', String(agents),
    '--latency-every', latencyEvery, '--throughput-every', throughputEvery,
    // Few summaries to read; the duration bounds the demo even if this process is SIGKILLed.
    '--summary-every', '60s', '--duration', '15m',
    ...extraArgs,
  ];
  installCleanupHandlers();
  // Its own process group, so that stop() and the cleanup handlers reach all of it,
  // and so that a Ctrl-C in the terminal reaches the test (which stops it) rather than it.
  const child = spawn(bin, args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const pgid = child.pid;
  if (pgid !== undefined) running.add(pgid);
  // Neither the child nor its pipes keep this process alive: a test that forgets
  // stop() ends anyway, and the 'exit' handler kills the demo.
  child.unref();
  child.stdout.unref();
  child.stderr.unref();

  // Everything the demo printed, stdout and stderr interleaved, for error messages.
  // The pipes are read to the end so that a full pipe never blocks the demo.
  let printed = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => { printed += chunk; });
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      running.delete(pgid);
      resolve({ code, signal });
    });
  });
  // 'close' comes after 'exit', once the pipes are drained: all the output is in `printed`.
  const closed = new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  const hasExited = () => child.exitCode !== null || child.signalCode !== null;

  const stop = async () => {
    // (No pid: it never started, as when the binary cannot be executed.)
    if (pgid !== undefined && !hasExited()) {
      killGroup(pgid, 'SIGTERM');
      try {
        await within(STOP_TIMEOUT_MS, 'SIGTERM ignored', exited);
      } catch {
        killGroup(pgid, 'SIGKILL');
        await within(5_000, `vantage demo (pid ${pgid}) survived SIGKILL`, exited);
      }
    }
  };

  const found = {};
  const ready = new Promise((resolve, reject) => {
    createInterface({ input: child.stdout, crlfDelay: Infinity }).on('line', (line) => {
      printed += `${line}\n`;
      let match;
      if ((match = /^vantage demo: server on (http:\/\/127\.0\.0\.1:\d+) \(SQLite archive /.exec(line))) {
        found.url = match[1];
      } else if ((match = /^ {2}dashboard {5}(\S+)$/.exec(line))) {
        found.dashboardLink = match[1];
      } else if ((match = /^ {2}admin token {3}(\S+)$/.exec(line))) {
        found.adminToken = match[1];
      } else if ((match = /^ {2}reader token {2}(\S+)$/.exec(line))) {
        found.readerToken = match[1];
      }
      if (found.url && found.dashboardLink && found.adminToken && found.readerToken) resolve();
    });
    child.once('error', reject); // e.g. the binary cannot be executed
    closed.then(({ code, signal }) => reject(new Error(`exited (code ${code}, signal ${signal}) before it was ready`)));
  });

  try {
    await within(STARTUP_TIMEOUT_MS, `not ready after ${STARTUP_TIMEOUT_MS / 1000}s`, ready);
  } catch (error) {
    await stop();
    await within(2_000, 'pipes still open', closed).catch(() => {});
    throw new Error(`vantage demo: ${error.message}; it printed:\n${printed}`, { cause: error });
  }
  return { ...found, stop, output: () => printed };
}

/** Calls the demo's API with a bearer token; returns the parsed JSON, throws unless 2xx. */
export async function api(demo, path, { token = demo.readerToken, method = 'GET', body } = {}) {
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(`${demo.url}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: HTTP ${response.status}: ${text}`);
  return text === '' ? null : JSON.parse(text);
}

/**
 * Polls `fn` until it returns a truthy value, and returns that value. Each call is
 * bounded by what is left of the timeout, so waitFor never outlives it.
 */
export async function waitFor(description, fn, { timeoutMs = 60_000, intervalMs = 250 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  for (let left = timeoutMs; left > 0; left = deadline - Date.now()) {
    try {
      const value = await within(left, `no answer within ${timeoutMs / 1000}s`, Promise.resolve().then(fn));
      if (value) return value;
      lastError = undefined; // a falsy answer since: that error is no longer the reason
    } catch (error) {
      lastError = error;
    }
    await delay(Math.max(0, Math.min(intervalMs, deadline - Date.now())));
  }
  const reason = lastError ? ` (last error: ${lastError.message ?? lastError})` : '';
  throw new Error(`timed out after ${timeoutMs / 1000}s waiting for ${description}${reason}`);
}

/** Launches Debian's Chromium headless, with a context of the given viewport. */
export async function launchBrowser({ width = 1280, height = 800 } = {}) {
  const executablePath = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
  if (!existsSync(executablePath)) {
    // Never skipped: a missing browser is a broken setup, not a reason to pass.
    throw new Error(`no Chromium at ${executablePath}: run scripts/install-deps (as root), which installs Debian's chromium`);
  }
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    args: ['--no-sandbox'], // the tests run as root, where Chromium's sandbox refuses to start
    timeout: 30_000,
  });
  try {
    const context = await browser.newContext({ viewport: { width, height } });
    const page = await context.newPage();
    return { browser, context, page };
  } catch (error) {
    await browser.close();
    throw error;
  }
}

/** Saves a PNG of `page` as target/screenshots/NAME.png (kept as a CI artefact); returns its path. */
export async function screenshot(page, name, { fullPage = false } = {}) {
  const dir = join(repoRoot, 'target', 'screenshots');
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${name}.png`);
  await page.screenshot({ path, fullPage });
  return path;
}
