// The vantage dashboard: one page over the REST API and its event stream. No build
// step and no dependencies: the server embeds this file (docs/dashboard.md).

const view = document.getElementById('view');
const STATES = ['ok', 'warning', 'critical'];
const COLOURS = { ok: '#0072b2', warning: '#e69f00', critical: '#d55e00', unknown: '#d9d9d9' };

// ---- the API ------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// The session cookie authenticates; the header marks changes as the dashboard's own.
async function api(path, { method = 'GET', body } = {}) {
  const response = await fetch(path, {
    method,
    credentials: 'same-origin',
    headers: { 'X-Vantage-Dashboard': '1', ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON: reported below */ }
  if (!response.ok) {
    throw new ApiError(response.status, json?.error ?? `${response.status} ${response.statusText}`);
  }
  return json;
}

const query = (params) => new URLSearchParams(
  Object.entries(params).filter(([, value]) => value !== undefined && value !== null && value !== ''),
).toString();

// ---- small DOM helpers ----------------------------------------------------------

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    // Through the CSSOM: the page's CSP refuses style attributes.
    else if (name === 'style') node.style.cssText = value;
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child !== undefined && child !== null) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

function stateBadge(state) {
  return el('span', { class: `state state-${state}` }, state);
}

// ---- units ------------------------------------------------------------------------

const METRICS = {
  health: { label: 'health score', higherIsBetter: true },
  rtt_median_us: { label: 'RTT median' },
  rtt_p95_us: { label: 'RTT p95' },
  jitter_us: { label: 'jitter (RFC 3550)' },
  loss_ratio: { label: 'loss' },
  received_bps: { label: 'throughput (received)', higherIsBetter: true },
  capacity_bps: { label: 'capacity (B_c − ε)', higherIsBetter: true },
};

function format(metric, value) {
  if (value === null || value === undefined || Number.isNaN(value)) return '—';
  if (metric.endsWith('_us')) {
    return value >= 1000 ? `${(value / 1000).toPrecision(3)} ms` : `${value.toPrecision(3)} µs`;
  }
  if (metric.endsWith('_bps')) {
    if (value >= 1e9) return `${(value / 1e9).toPrecision(3)} Gbit/s`;
    if (value >= 1e6) return `${(value / 1e6).toPrecision(3)} Mbit/s`;
    return `${(value / 1e3).toPrecision(3)} kbit/s`;
  }
  if (metric.endsWith('_ratio')) return `${(value * 100).toPrecision(3)} %`;
  return value.toFixed(2);
}

function ago(seconds) {
  if (seconds < 90) return `${Math.round(seconds)} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  return `${(seconds / 3600).toFixed(1)} h ago`;
}

const time = (microseconds) => new Date(microseconds / 1000).toLocaleTimeString();

// ---- the live event stream ------------------------------------------------------

const live = { source: null, listeners: new Set() };

function connectLive() {
  if (live.source) return;
  const status = document.getElementById('live');
  const source = new EventSource('/api/v1/subscribe?kinds=result,alert,sla,diagnosis');
  live.source = source;
  source.onopen = () => { status.textContent = '● live'; status.className = ''; };
  source.onerror = () => {
    status.textContent = '○ disconnected: retrying';
    status.className = 'down';
  };
  for (const kind of ['result', 'alert', 'sla', 'diagnosis']) {
    source.addEventListener(kind, (event) => {
      const data = JSON.parse(event.data);
      for (const listener of live.listeners) listener(kind, data);
    });
  }
}

// A view's live handler, dropped when the view changes.
function onLive(listener) {
  live.listeners.add(listener);
  return () => live.listeners.delete(listener);
}

// Calls `refresh` at most once per `ms` however many events arrive, and never more
// than a tenth of the time: a big mesh whose reload takes 300 ms reloads every 3 s.
function throttled(refresh, ms) {
  let timer = null;
  let running = false;
  let again = false;
  let lastMs = 0;
  const schedule = () => {
    if (timer) {
      again ||= running; // arrived during a reload: one more after it
      return;
    }
    timer = setTimeout(async () => {
      const started = performance.now();
      running = true;
      try {
        await refresh();
      } finally {
        lastMs = performance.now() - started;
        running = false;
        timer = null;
        if (again) {
          again = false;
          schedule();
        }
      }
    }, Math.max(ms, 10 * lastMs));
  };
  return schedule;
}

// ---- the matrix canvas (grid and heat map) --------------------------------------

// A CSS colour (#rrggbb or rgb(r,g,b)) as one pixel of an ImageData's Uint32Array
// (little-endian RGBA), cached: a page uses a few hundred colours at most.
const packedColours = new Map();
function packed(colour) {
  let value = packedColours.get(colour);
  if (value === undefined) {
    const [r, g, b] = colour.startsWith('#')
      ? [1, 3, 5].map((at) => parseInt(colour.slice(at, at + 2), 16))
      : colour.match(/\d+/g).map(Number);
    value = ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
    packedColours.set(colour, value);
  }
  return value;
}
const HATCH = packed('#f5f5f5');
const DIAGONAL = { colour: '#f0f0f0', stale: false };

// Draws an n×n matrix of agents on a canvas; each cell is painted by `paint`, either
// one colour or two triangles (row→column above the diagonal of the cell, the reverse
// below). Arrow keys move a focus cell, Enter opens it; the details line describes
// the focused or hovered cell in words.
class Matrix {
  constructor({ labels, groups, paint, describe, open }) {
    Object.assign(this, { labels, groups, paint, describe, open });
    this.focus = { row: 0, column: Math.min(1, labels.length - 1) };
    this.canvas = el('canvas', {
      class: 'matrix', tabindex: '0', role: 'img',
      'aria-label': `${labels.length} by ${labels.length} matrix of agent pairs; use the arrow keys to move between cells and Enter to open one`,
    });
    this.details = el('div', { class: 'details', 'aria-live': 'polite' }, 'Hover over a cell, or focus the matrix and use the arrow keys.');
    // The focused cell's outline is a box over the canvas: moving it repaints nothing.
    this.focusBox = el('div', { class: 'matrix-focus', hidden: true });
    this.node = el('div', {}, el('div', { class: 'matrix-wrap' }, this.canvas, this.focusBox), this.details);
    this.canvas.addEventListener('mousemove', (event) => this.hover(event));
    this.canvas.addEventListener('click', (event) => {
      const cell = this.cellAt(event);
      if (cell) this.open(cell.row, cell.column);
    });
    this.canvas.addEventListener('keydown', (event) => this.key(event));
    this.canvas.addEventListener('focus', () => { this.focused = true; this.showFocus(); this.say(this.focus); });
    this.canvas.addEventListener('blur', () => { this.focused = false; this.showFocus(); });
  }

  layout(width) {
    const n = this.labels.length;
    const longest = Math.max(0, ...this.labels.map((label) => label.length));
    const available = Math.max(200, width - 20);
    // Labels only where cells are big enough to tell rows apart by eye.
    let cell = Math.floor(available / (n + 1));
    this.withLabels = cell >= 9 || n <= 60;
    this.labelSize = this.withLabels ? Math.min(160, 7 * longest + 12) : 0;
    cell = Math.floor((available - this.labelSize) / Math.max(1, n));
    this.cell = Math.max(2, Math.min(32, cell));
    const side = this.labelSize + this.cell * n + 1;
    const ratio = window.devicePixelRatio || 1;
    this.canvas.width = side * ratio;
    this.canvas.height = side * ratio;
    this.canvas.style.width = `${side}px`;
    // Geometry for scripts that click a cell (the browser tests).
    this.canvas.dataset.cellSize = this.cell;
    this.canvas.dataset.labelSize = this.labelSize;
    this.canvas.style.height = `${side}px`;
    this.context = this.canvas.getContext('2d');
    this.context.setTransform(ratio, 0, 0, ratio, 0, 0);
  }

  draw() {
    const { context: g, cell, labelSize: offset, labels } = this;
    const n = labels.length;
    g.clearRect(0, 0, this.canvas.width, this.canvas.height);
    g.font = `${Math.min(12, Math.max(9, cell - 2))}px system-ui, sans-serif`;
    g.fillStyle = '#1b1b1b';
    if (this.withLabels) {
      g.textBaseline = 'middle';
      for (let i = 0; i < n; i++) {
        const text = labels[i].length > 22 ? `${labels[i].slice(0, 21)}…` : labels[i];
        g.textAlign = 'right';
        g.fillText(text, offset - 6, offset + i * cell + cell / 2);
        g.save();
        g.translate(offset + i * cell + cell / 2, offset - 6);
        g.rotate(-Math.PI / 2);
        g.textAlign = 'left';
        g.fillText(text, 0, 0);
        g.restore();
      }
    }
    this.paintCells(g, offset, cell, n);
    // Group boundaries (a zone, a site): dark lines between blocks.
    g.strokeStyle = '#1b1b1b';
    g.lineWidth = 1.5;
    for (const boundary of this.groups ?? []) {
      const at = offset + boundary * cell;
      g.beginPath();
      g.moveTo(offset, at); g.lineTo(offset + n * cell, at);
      g.moveTo(at, offset); g.lineTo(at, offset + n * cell);
      g.stroke();
    }
    this.showFocus();
  }

  showFocus() {
    const { cell, labelSize: offset, focus } = this;
    this.focusBox.hidden = !this.focused;
    Object.assign(this.focusBox.style, {
      left: `${offset + focus.column * cell}px`, top: `${offset + focus.row * cell}px`,
      width: `${cell}px`, height: `${cell}px`,
    });
  }

  // Cells are written pixel by pixel (90 000 cells of a 300-agent grid as canvas
  // paths would take half a second), a band of rows at a time so the pixel buffer
  // stays small; marks are drawn as text on top where cells are big enough to hold
  // them. `paint(row, column)` gives a look {colour, stale, mark}, or
  // {forward: look, reverse: look} for the two triangles.
  paintCells(g, offset, cell, n) {
    const ratio = window.devicePixelRatio || 1;
    const edge = (index) => Math.round(index * cell * ratio);
    const side = edge(n);
    if (side === 0) return;
    const origin = Math.round(offset * ratio);
    const gap = Math.max(1, Math.round(ratio));
    const hatch = cell >= 6;
    const bandRows = Math.max(1, Math.floor(256 / Math.max(1, edge(1))));
    // One buffer serves every band (a band's height may differ by a rounded pixel).
    const image = g.createImageData(side, Math.min(side, edge(bandRows) + 1));
    const pixels = new Uint32Array(image.data.buffer);
    const marks = [];
    for (let first = 0; first < n; first += bandRows) {
      const last = Math.min(n, first + bandRows);
      const top = edge(first);
      pixels.fill(0);
      const fill = (x0, y0, size, forward, reverse) => {
        const s = size - gap;
        const [a, b] = [packed(forward.colour), packed(reverse.colour)];
        const [aHatched, bHatched] = [forward.stale && hatch, reverse.stale && hatch];
        for (let py = 0; py < s; py++) {
          let at = (y0 - top + py) * side + x0;
          for (let px = 0; px < s; px++, at++) {
            const upper = px + py < s;
            const hatched = upper ? aHatched : bHatched;
            // Stale: hatched, so it reads as "not current" without relying on colour.
            pixels[at] = hatched && (px - py) % 4 === 0 ? HATCH : upper ? a : b;
          }
        }
      };
      for (let row = first; row < last; row++) {
        const y0 = edge(row);
        for (let column = 0; column < n; column++) {
          const x0 = edge(column);
          const size = Math.min(edge(column + 1) - x0, edge(row + 1) - y0);
          if (row === column) {
            fill(x0, y0, size + gap, DIAGONAL, DIAGONAL);
            continue;
          }
          const look = this.paint(row, column);
          const [forward, reverse] = look.forward ? [look.forward, look.reverse] : [look, look];
          fill(x0, y0, size, forward, reverse);
          if (cell >= 14 && (forward.mark || reverse.mark)) marks.push([row, column, forward.mark, reverse.mark]);
        }
      }
      g.putImageData(image, origin, origin + top, 0, 0, side, edge(last) - top);
    }
    g.fillStyle = '#000';
    g.textAlign = 'center';
    g.textBaseline = 'middle';
    g.font = `${Math.round(cell / 2.4)}px system-ui, sans-serif`;
    for (const [row, column, upper, lower] of marks) {
      const [x, y] = [offset + column * cell, offset + row * cell];
      if (upper) g.fillText(upper, x + cell / 3, y + cell / 3);
      if (lower) g.fillText(lower, x + (2 * cell) / 3, y + (2 * cell) / 3);
    }
  }

  cellAt(event) {
    const rect = this.canvas.getBoundingClientRect();
    const column = Math.floor((event.clientX - rect.left - this.labelSize) / this.cell);
    const row = Math.floor((event.clientY - rect.top - this.labelSize) / this.cell);
    const n = this.labels.length;
    if (row < 0 || column < 0 || row >= n || column >= n || row === column) return null;
    return { row, column };
  }

  hover(event) {
    const cell = this.cellAt(event);
    this.canvas.style.cursor = cell ? 'pointer' : 'default';
    if (cell) this.say(cell);
  }

  say({ row, column }) {
    this.current = { row, column };
    if (row === column) {
      this.details.textContent = `${this.labels[row]} (itself)`;
      return;
    }
    this.details.textContent = this.describe(row, column);
  }

  // What a live reload keeps: taken before the old canvas leaves the page, which
  // moves the keyboard focus to the body.
  snapshot() {
    return { focus: this.focus, current: this.current, focused: document.activeElement === this.canvas };
  }

  // After a live reload: the same cell described, the focus where it was.
  restore(previous) {
    if (!previous) return;
    this.focus = previous.focus;
    if (previous.current) this.say(previous.current);
    if (previous.focused) this.canvas.focus();
  }

  key(event) {
    const n = this.labels.length;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (moves[event.key]) {
      const [dr, dc] = moves[event.key];
      this.focus = {
        row: Math.min(n - 1, Math.max(0, this.focus.row + dr)),
        column: Math.min(n - 1, Math.max(0, this.focus.column + dc)),
      };
      this.showFocus();
      this.say(this.focus);
      event.preventDefault();
    } else if (event.key === 'Enter' && this.focus.row !== this.focus.column) {
      this.open(this.focus.row, this.focus.column);
    }
  }
}

// Orders agents by a tag (then name) and returns the indices where the tag changes.
function grouped(names, tagsOf, tag) {
  const order = [...names].sort((a, b) => {
    const ga = tag ? (tagsOf(a)[tag] ?? '\uffff') : '';
    const gb = tag ? (tagsOf(b)[tag] ?? '\uffff') : '';
    return ga.localeCompare(gb) || a.localeCompare(b);
  });
  const boundaries = [];
  if (tag) {
    for (let i = 1; i < order.length; i++) {
      if ((tagsOf(order[i])[tag] ?? '') !== (tagsOf(order[i - 1])[tag] ?? '')) boundaries.push(i);
    }
  }
  return { order, boundaries };
}

const pairLink = (client, server) => `#/pair/${encodeURIComponent(client)}/${encodeURIComponent(server)}`;

// ---- view: mesh grid ------------------------------------------------------------

const gridSettings = { metric: 'rtt_median_us', group: '', sort: 'name', hysteresis: 3 };

// A grid's cells as the API's columns (arrays indexed by cell; `client` and `server`
// index `names`), with an n×n table from a pair to its cell: no object per cell, so a
// 300-agent grid (89 700 cells) stays a few megabytes of page memory.
class GridData {
  constructor({ metric, names, tags, scale, columns }) {
    Object.assign(this, { metric, names, tags, scale, columns });
    this.size = columns.client.length;
    this.position = new Map(names.map((name, index) => [name, index]));
    const n = names.length;
    this.at = new Int32Array(n * n).fill(-1);
    for (let i = 0; i < this.size; i++) this.at[columns.client[i] * n + columns.server[i]] = i;
  }

  // The cell of client → server (agent positions in `names`), or -1.
  index(client, server) { return this.at[client * this.names.length + server]; }

  state(i) { return this.columns.state[i]; }

  stale(i) { return this.columns.stale?.[i] ?? false; }

  // One cell as an object, for words and tables.
  cell(i) {
    if (i < 0) return undefined;
    const c = this.columns;
    return {
      client: this.names[c.client[i]], server: this.names[c.server[i]], value: c.value[i],
      baseline: c.baseline?.[i] ?? null, state: c.state[i], latest: c.latest_state?.[i] ?? c.state[i],
      age: c.age_s[i], stale: this.stale(i), results: c.results?.[i] ?? 1, markers: c.markers?.[i],
    };
  }
}

// The grid's cells from /api/v1/grid, or from the health matrix for `health`.
async function loadGrid(settings) {
  if (settings.metric === 'health') {
    const matrix = await api('/api/v1/health/matrix?layout=columns');
    const tags = Object.fromEntries(matrix.hosts.map((host) => [host.name, host.zone ? { zone: host.zone } : {}]));
    const p = matrix.pairs;
    const scored = [...p.score.keys()].filter((i) => p.score[i] !== null);
    const pick = (column) => scored.map((i) => column[i]);
    const state = scored.map((i) => (p.markers[i].includes('timeout') ? 'critical' : p.state[i] === 'degraded' ? 'warning' : 'ok'));
    return new GridData({
      metric: 'health', names: matrix.hosts.map((host) => host.name), tags,
      columns: { client: pick(p.client), server: pick(p.server), value: pick(p.score), state, age_s: pick(p.age_s), markers: pick(p.markers) },
    });
  }
  const answer = await api(`/api/v1/grid?${query({ metric: settings.metric, hysteresis: settings.hysteresis })}`);
  return new GridData({
    metric: answer.metric,
    names: answer.agents.map((agent) => agent.name),
    tags: Object.fromEntries(answer.agents.map((agent) => [agent.name, agent.tags])),
    scale: answer.scale,
    columns: answer.cells,
  });
}

// How a grid cell looks, by state (and staleness); one object each, shared by cells.
const LOOKS = { unknown: { colour: COLOURS.unknown, mark: '' } };
for (const [state, mark] of [['ok', ''], ['warning', '!'], ['critical', '✕']]) {
  LOOKS[state] = { colour: COLOURS[state], stale: false, mark };
  LOOKS[`${state} stale`] = { colour: COLOURS[state], stale: true, mark };
}
// Worst first: one critical cell outweighs any number of warnings on a 300-agent grid.
const BADNESS = { ok: 0, warning: 1, critical: 1000 };

const severity = (cell) => (cell ? STATES.indexOf(cell.state) + (cell.stale ? 0.5 : 0) : -1);

function describeCell(metric, client, server, cell) {
  if (!cell) return `${client} → ${server}: no result`;
  const parts = [`${client} → ${server}: ${format(metric, cell.value)} (${cell.state}`];
  if (cell.latest !== cell.state) parts.push(`, latest result ${cell.latest}`);
  parts.push(')');
  if (cell.baseline !== null && cell.baseline !== undefined) parts.push(`, baseline ${format(metric, cell.baseline)}`);
  parts.push(`, ${ago(cell.age)}`);
  if (cell.stale) parts.push(', STALE: results are overdue');
  if (cell.markers?.length) parts.push(`, markers ${cell.markers.join(' ')}`);
  return parts.join('');
}

async function gridView() {
  const settings = gridSettings;
  const controls = el('div', { class: 'controls' });
  const body = el('div', {}, el('p', { class: 'muted' }, 'Loading…'));
  view.replaceChildren(el('h1', {}, 'Mesh grid'), controls, body);
  let data;
  let matrix = null;

  const metricSelect = el('select', { id: 'grid-metric', onchange: (event) => { settings.metric = event.target.value; reload(); } },
    Object.entries(METRICS).map(([name, { label }]) => el('option', { value: name, selected: name === settings.metric }, label)));
  const groupSelect = el('select', { id: 'grid-group', onchange: (event) => { settings.group = event.target.value; draw(); } });
  const sortSelect = el('select', { id: 'grid-sort', onchange: (event) => { settings.sort = event.target.value; draw(); } },
    el('option', { value: 'name', selected: settings.sort === 'name' }, 'by name'),
    el('option', { value: 'worst', selected: settings.sort === 'worst' }, 'worst first'));
  const hysteresisInput = el('input', {
    id: 'grid-hysteresis', type: 'number', min: '1', max: '10', value: String(settings.hysteresis),
    onchange: (event) => { settings.hysteresis = Math.max(1, Math.min(10, Number(event.target.value) || 3)); reload(); },
  });
  controls.append(
    el('label', {}, 'Colour by', metricSelect),
    el('label', {}, 'Group by tag', groupSelect),
    el('label', {}, 'Order', sortSelect),
    el('label', {}, 'Results to change colour', hysteresisInput),
  );

  function draw() {
    const tagsOf = (name) => data.tags[name] ?? {};
    const tagNames = [...new Set(Object.values(data.tags).flatMap((tags) => Object.keys(tags)))].sort();
    groupSelect.replaceChildren(el('option', { value: '' }, 'none'),
      ...tagNames.map((tag) => el('option', { value: tag, selected: tag === settings.group }, tag)));
    let { order, boundaries } = grouped(data.names, tagsOf, settings.group);
    const states = data.columns.state;
    if (settings.sort === 'worst') {
      // Worst first within each group: by the count of critical, then warning, cells.
      const badness = new Float64Array(data.names.length);
      for (let i = 0; i < data.size; i++) {
        const weight = BADNESS[states[i]] ?? 0;
        badness[data.columns.client[i]] += weight;
        badness[data.columns.server[i]] += weight;
      }
      const bad = (name) => badness[data.position.get(name)];
      const groupOf = (name) => (settings.group ? tagsOf(name)[settings.group] ?? '\uffff' : '');
      order = [...order].sort((a, b) => groupOf(a).localeCompare(groupOf(b)) || bad(b) - bad(a) || a.localeCompare(b));
    }
    // Row/column → the agent's position in data.names.
    const agent = order.map((name) => data.position.get(name));
    const cellOf = (row, column) => data.index(agent[row], agent[column]);
    const look = (i) => (i < 0 ? LOOKS.unknown : LOOKS[`${states[i]}${data.stale(i) ? ' stale' : ''}`]);
    const previous = matrix?.labels.join('\n') === order.join('\n') ? matrix.snapshot() : null;
    matrix = new Matrix({
      labels: order,
      groups: boundaries,
      paint: (row, column) => ({ forward: look(cellOf(row, column)), reverse: look(cellOf(column, row)) }),
      describe: (row, column) => {
        const [a, b] = [order[row], order[column]];
        return `${describeCell(data.metric, a, b, data.cell(cellOf(row, column)))}. ${describeCell(data.metric, b, a, data.cell(cellOf(column, row)))}.`;
      },
      open: (row, column) => { location.hash = pairLink(order[row], order[column]); },
    });
    const flagged = [];
    const counts = Object.fromEntries(STATES.map((state) => [state, 0]));
    let stale = 0;
    for (let i = 0; i < data.size; i++) {
      counts[states[i]] += 1;
      if (data.stale(i)) stale += 1;
      if (states[i] !== 'ok' || data.stale(i)) flagged.push(data.cell(i));
    }
    const worst = flagged
      .sort((a, b) => severity(b) - severity(a) || a.client.localeCompare(b.client) || a.server.localeCompare(b.server))
      .slice(0, 50);
    body.replaceChildren(
      el('div', { class: 'legend' },
        el('span', {}, el('span', { class: 'swatch', style: `background:${COLOURS.ok}` }), 'ok'),
        el('span', {}, el('span', { class: 'swatch', style: `background:${COLOURS.warning}` }), '! warning'),
        el('span', {}, el('span', { class: 'swatch', style: `background:${COLOURS.critical}` }), '✕ critical'),
        el('span', {}, el('span', { class: 'swatch', style: `background:${COLOURS.unknown}` }), 'no result'),
        el('span', {}, 'hatched: stale'),
        el('span', { class: 'muted' }, 'upper-left triangle: row → column; lower-right: column → row')),
      el('p', { id: 'grid-summary' }, `${data.names.length} agents, ${data.size} measured pairs: ${STATES.map((state) => `${counts[state]} ${state}`).join(', ')}, ${stale} stale.`),
      matrix.node,
      el('h2', {}, 'Pairs that need a look'),
      worst.length === 0
        ? el('p', { id: 'grid-worst-empty' }, 'Every measured pair is ok and current.')
        : el('div', { class: 'table-wrap' }, el('table', { id: 'grid-worst' },
          el('thead', {}, el('tr', {}, el('th', {}, 'pair'), el('th', { class: 'num' }, METRICS[data.metric].label),
            el('th', { class: 'num' }, 'baseline'), el('th', {}, 'state'), el('th', { class: 'hide-narrow' }, 'newest'))),
          el('tbody', {}, worst.map((cell) => el('tr', {},
            el('td', {}, el('a', { href: pairLink(cell.client, cell.server) }, `${cell.client} → ${cell.server}`)),
            el('td', { class: 'num' }, format(data.metric, cell.value)),
            el('td', { class: 'num' }, format(data.metric, cell.baseline)),
            el('td', {}, stateBadge(cell.stale ? 'stale' : cell.state)),
            el('td', { class: 'hide-narrow' }, ago(cell.age))))))),
    );
    matrix.layout(view.clientWidth);
    matrix.draw();
    matrix.restore(previous);
    // For the benchmark: when the first grid was on screen.
    if (performance.getEntriesByName('vantage:grid-drawn').length === 0) performance.mark('vantage:grid-drawn');
  }

  async function reload() {
    try {
      data = await loadGrid(settings);
      draw();
    } catch (error) {
      body.replaceChildren(el('p', { class: 'error', role: 'alert' }, `Cannot load the grid: ${error.message}`));
    }
  }

  await reload();
  const refresh = throttled(reload, 2000);
  // A result may change a cell; staleness changes with time alone.
  const timer = setInterval(reload, 30000);
  const unsubscribe = onLive((kind) => { if (kind === 'result') refresh(); });
  return () => { clearInterval(timer); unsubscribe(); };
}

// ---- view: heat map of health scores by zone -----------------------------------

// Cividis-like ramp (perceptually uniform, colour-blind safe) from score 0 to 1.
const RAMP = ['#00204c', '#414d6b', '#7c7b78', '#bcaf6f', '#ffe945'];
function rampColour(position) {
  const low = Math.floor(position);
  const high = Math.min(RAMP.length - 1, low + 1);
  const t = position - low;
  const channel = (hex, index) => parseInt(hex.slice(1 + 2 * index, 3 + 2 * index), 16);
  const mix = [0, 1, 2].map((index) => Math.round(channel(RAMP[low], index) * (1 - t) + channel(RAMP[high], index) * t));
  return `rgb(${mix.join(',')})`;
}
// 256 steps are finer than the eye tells apart, and keep a heat map to 256 colours.
const RAMP_STEPS = Array.from({ length: 256 }, (_, step) => rampColour((step / 255) * (RAMP.length - 1)));
const ramp = (score) => RAMP_STEPS[Math.round(Math.max(0, Math.min(1, score)) * 255)];

async function heatmapView() {
  view.replaceChildren(el('h1', {}, 'Health heat map'), el('p', { class: 'muted' }, 'Loading…'));
  async function reload() {
    let matrix;
    try {
      matrix = await api('/api/v1/health/matrix?layout=columns');
    } catch (error) {
      view.replaceChildren(el('h1', {}, 'Health heat map'), el('p', { class: 'error', role: 'alert' }, `Cannot load the health matrix: ${error.message}`));
      return;
    }
    const names = matrix.hosts.map((host) => host.name);
    const zoneOf = Object.fromEntries(matrix.hosts.map((host) => [host.name, host.zone ?? '']));
    const { order, boundaries } = grouped(names, (name) => ({ zone: zoneOf[name] }), 'zone');
    const p = matrix.pairs;
    const data = new GridData({ metric: 'health', names, tags: {}, columns: { ...p, value: p.score } });
    const agent = order.map((name) => data.position.get(name));
    const pairOf = (row, column) => data.index(agent[row], agent[column]);
    const scored = p.score.filter((score) => score !== null).length;
    const heat = new Matrix({
      labels: order,
      groups: boundaries,
      paint: (row, column) => {
        const i = pairOf(row, column);
        return i >= 0 && p.score[i] !== null
          ? { colour: ramp(p.score[i]), mark: p.state[i] === 'degraded' ? '!' : '' }
          : LOOKS.unknown;
      },
      describe: (row, column) => {
        const i = pairOf(row, column);
        const where = `${order[row]} (zone ${zoneOf[order[row]] || 'none'}) → ${order[column]} (zone ${zoneOf[order[column]] || 'none'})`;
        if (i < 0 || p.score[i] === null) return `${where}: no recent health round`;
        return `${where}: score ${p.score[i].toFixed(2)}, ${p.state[i]}${p.markers[i].length ? `, markers ${p.markers[i].join(' ')}` : ''}, ${ago(p.age_s[i])}`;
      },
      open: (row, column) => { location.hash = pairLink(order[row], order[column]); },
    });
    const zones = [...new Set(order.map((name) => zoneOf[name] || 'none'))];
    view.replaceChildren(
      el('h1', {}, 'Health heat map'),
      el('p', {}, `Health score of each ordered pair (Chard et al., FGCS 2015), rows and columns ordered by zone: ${zones.join(', ')}. ${scored} of ${names.length * (names.length - 1)} pairs scored.`),
      el('div', { class: 'legend' }, [0, 0.25, 0.5, 0.75, 1].map((score) => el('span', {},
        el('span', { class: 'swatch', style: `background:${ramp(score)}` }), score.toFixed(2))),
      el('span', {}, el('span', { class: 'swatch', style: `background:${COLOURS.unknown}` }), 'no recent round'),
      el('span', {}, '! a marker fired')),
      heat.node,
      el('h2', {}, 'Hosts'),
      el('table', { id: 'heatmap-hosts' }, el('thead', {}, el('tr', {}, el('th', {}, 'host'), el('th', {}, 'zone'), el('th', { class: 'num' }, 'score'), el('th', { class: 'num' }, 'pairs'))),
        el('tbody', {}, [...matrix.hosts].sort((a, b) => (a.score ?? 2) - (b.score ?? 2)).map((host) => el('tr', {},
          el('td', {}, host.name), el('td', {}, host.zone ?? '—'),
          el('td', { class: 'num' }, host.score === null || host.score === undefined ? '—' : host.score.toFixed(2)),
          el('td', { class: 'num' }, host.pairs))))),
    );
    heat.layout(view.clientWidth);
    heat.draw();
    if (performance.getEntriesByName('vantage:heatmap-drawn').length === 0) performance.mark('vantage:heatmap-drawn');
  }
  await reload();
  const refresh = throttled(reload, 5000);
  const unsubscribe = onLive((kind, data) => { if (kind === 'result' && data.test === 'health') refresh(); });
  return unsubscribe;
}

// ---- view: agents ---------------------------------------------------------------

// An agent heartbeats every few seconds; silent for this long, it is down.
const ALIVE_WITHIN_S = 120;

async function agentsView() {
  view.replaceChildren(el('h1', {}, 'Agents'), el('p', { class: 'muted' }, 'Loading…'));
  async function reload() {
    const [{ agents }, latest] = await Promise.all([
      api('/api/v1/agents'),
      api(`/api/v1/results?${query({ limit: 1000 })}`),
    ]);
    const lastResult = new Map();
    for (const result of latest.results ?? latest) {
      for (const name of [result.client, result.server]) {
        if (!lastResult.has(name)) lastResult.set(name, result);
      }
    }
    const now = Date.now();
    const rows = agents.map((agent) => {
      const silent = (now - Date.parse(agent.last_seen_at)) / 1000;
      const last = lastResult.get(agent.name);
      return el('tr', { 'data-agent': agent.name },
        el('td', {}, agent.name),
        el('td', {}, stateBadge(silent <= ALIVE_WITHIN_S ? 'ok' : 'critical'), ' ', silent <= ALIVE_WITHIN_S ? 'alive' : 'silent', el('br'), el('span', { class: 'muted' }, `seen ${ago(silent)}`)),
        el('td', {}, agent.version ?? '—'),
        el('td', {}, Object.entries(agent.tags).map(([key, value]) => `${key}=${value}`).join(', ') || '—'),
        el('td', { class: 'hide-narrow' }, agent.capabilities.join(', ')),
        el('td', { class: 'hide-narrow' }, agent.addresses.join(', ')),
        el('td', {}, last ? el('a', { href: pairLink(last.client, last.server) }, `${last.test} ${last.client} → ${last.server}, ${ago((now - Date.parse(last.start_time)) / 1000)}`) : '—'),
      );
    });
    view.replaceChildren(
      el('h1', {}, 'Agents'),
      el('p', {}, `${agents.length} registered.`),
      el('div', { class: 'table-wrap' }, el('table', { id: 'agents' },
        el('thead', {}, el('tr', {}, ['name', 'liveness', 'version', 'tags'].map((h) => el('th', {}, h)),
          el('th', { class: 'hide-narrow' }, 'capabilities'), el('th', { class: 'hide-narrow' }, 'addresses'), el('th', {}, 'last result'))),
        el('tbody', {}, rows))),
    );
  }
  await reload().catch((error) => view.append(el('p', { class: 'error', role: 'alert' }, `Cannot load agents: ${error.message}`)));
  const refresh = throttled(() => reload().catch(() => {}), 5000);
  const timer = setInterval(refresh, 30000);
  const unsubscribe = onLive((kind) => { if (kind === 'result') refresh(); });
  return () => { clearInterval(timer); unsubscribe(); };
}

// ---- view: schedule -------------------------------------------------------------

async function scheduleView() {
  view.replaceChildren(el('h1', {}, 'Schedule'), el('p', { class: 'muted' }, 'Loading…'));
  async function reload() {
    const now = Date.now();
    const from = new Date(now - 15 * 60 * 1000).toISOString();
    const to = new Date(now + 5 * 60 * 1000).toISOString();
    const { runs } = await api(`/api/v1/runs?${query({ from, to })}`);
    const upcoming = runs.filter((run) => ['scheduled', 'dispatched'].includes(run.state)).sort((a, b) => a.planned_start_us - b.planned_start_us);
    const past = runs.filter((run) => !['scheduled', 'dispatched'].includes(run.state)).sort((a, b) => b.planned_start_us - a.planned_start_us).slice(0, 200);
    const table = (id, list) => el('div', { class: 'table-wrap' }, el('table', { id },
      el('thead', {}, el('tr', {}, ['planned start', 'task', 'test', 'pair', 'state', 'reason'].map((h) => el('th', {}, h)))),
      el('tbody', {}, list.map((run) => el('tr', {},
        el('td', {}, time(run.planned_start_us)),
        el('td', {}, run.task), el('td', {}, run.test),
        el('td', {}, el('a', { href: pairLink(run.client, run.server) }, `${run.client} → ${run.server}`)),
        el('td', {}, run.state), el('td', {}, run.reason ?? ''))))));
    const notStarted = past.filter((run) => run.reason).length;
    view.replaceChildren(
      el('h1', {}, 'Schedule'),
      el('h2', {}, `Upcoming (${upcoming.length})`), table('schedule-upcoming', upcoming),
      el('h2', {}, `Last 15 minutes (${past.length}, ${notStarted} with a reason)`), table('schedule-past', past),
    );
  }
  await reload().catch((error) => view.append(el('p', { class: 'error', role: 'alert' }, `Cannot load runs: ${error.message}`)));
  const timer = setInterval(() => reload().catch(() => {}), 10000);
  return () => clearInterval(timer);
}

// ---- view: pair explorer --------------------------------------------------------

const CHARTS = [
  { metric: 'rtt_median_us', title: 'RTT (median; band: min–max of the runs in each bucket)' },
  { metric: 'rtt_p95_us', title: 'RTT p95' },
  { metric: 'loss_ratio', title: 'Loss' },
  { metric: 'jitter_us', title: 'Jitter (RFC 3550)' },
  { metric: 'received_bps', title: 'Throughput (received)' },
  { metric: 'capacity_bps', title: 'Capacity (B_c − ε)' },
];

const RANGES = { '15m': 900, '1h': 3600, '6h': 6 * 3600, '24h': 86400, '7d': 7 * 86400 };

// One SVG chart of both directions' buckets; dragging across it selects a range.
// An SVG plot with linear axes, x over [xFrom, xTo] and y over [0, yTop]: five
// labelled horizontal grid lines and five labels along x. Returns the node, the
// scales and the geometry the caller draws in.
function plotFrame(label, { xFrom, xTo, yTop, xLabel, yLabel }) {
  const width = 640;
  const height = 180;
  const pad = { left: 64, right: 8, top: 8, bottom: 22 };
  const node = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': label });
  const x = (value) => pad.left + ((value - xFrom) / (xTo - xFrom)) * (width - pad.left - pad.right);
  const y = (value) => height - pad.bottom - (value / yTop) * (height - pad.top - pad.bottom);
  for (let i = 0; i <= 4; i++) {
    const value = (yTop * i) / 4;
    node.append(svg('line', { class: 'grid-line', x1: pad.left, x2: width - pad.right, y1: y(value), y2: y(value) }));
    const text = svg('text', { class: 'axis', x: pad.left - 4, y: y(value) + 4, 'text-anchor': 'end' });
    text.textContent = yLabel(value);
    node.append(text);
  }
  for (let i = 0; i <= 4; i++) {
    const value = xFrom + ((xTo - xFrom) * i) / 4;
    const text = svg('text', { class: 'axis', x: x(value), y: height - 6, 'text-anchor': i === 0 ? 'start' : i === 4 ? 'end' : 'middle' });
    text.textContent = xLabel(value);
    node.append(text);
  }
  return { node, x, y, width, height, pad };
}

function chart(metric, title, series, from, to, select) {
  const all = series.flatMap(({ buckets }) => buckets.flatMap((bucket) => [bucket.min, bucket.max]));
  const box = el('div', { class: 'chart', 'data-metric': metric }, el('h3', {}, title));
  if (all.length === 0) {
    box.append(el('p', { class: 'muted' }, 'No results in this range.'));
    return box;
  }
  const top = Math.max(...all);
  const { node, x, y, width, height, pad } = plotFrame(title, {
    xFrom: from,
    xTo: to,
    yTop: top > 0 ? top * 1.1 : 1,
    xLabel: (t) => new Date(t).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }),
    yLabel: (value) => format(metric, value),
  });
  for (const { direction, buckets } of series) {
    if (buckets.length === 0) continue;
    const points = buckets.map((bucket) => ({ t: Date.parse(bucket.start_time), ...bucket }));
    const band = points.map((p) => `${x(p.t)},${y(p.max)}`).concat([...points].reverse().map((p) => `${x(p.t)},${y(p.min)}`));
    node.append(svg('polygon', { class: `band-${direction}`, points: band.join(' ') }));
    node.append(svg('polyline', { class: `line-${direction}`, points: points.map((p) => `${x(p.t)},${y(p.avg)}`).join(' ') }));
    // Sparse buckets: a dot per bucket, so single results are visible.
    if (points.length <= 60) {
      for (const p of points) node.append(svg('circle', { class: `line-${direction}`, cx: x(p.t), cy: y(p.avg), r: 2 }));
    }
  }
  // Range selection by dragging: the explorer reloads the range with finer buckets.
  let start = null;
  const selection = svg('rect', { class: 'selection', y: pad.top, height: height - pad.top - pad.bottom, width: 0 });
  node.append(selection);
  const toTime = (event) => {
    const rect = node.getBoundingClientRect();
    const px = ((event.clientX - rect.left) / rect.width) * width;
    return from + ((px - pad.left) / (width - pad.left - pad.right)) * (to - from);
  };
  node.addEventListener('mousedown', (event) => { start = toTime(event); });
  node.addEventListener('mousemove', (event) => {
    if (start === null) return;
    const end = toTime(event);
    selection.setAttribute('x', x(Math.min(start, end)));
    selection.setAttribute('width', Math.abs(x(end) - x(start)));
  });
  node.addEventListener('mouseup', (event) => {
    const end = toTime(event);
    const [a, b] = [Math.min(start, end), Math.max(start, end)];
    start = null;
    selection.setAttribute('width', 0);
    if (b - a > 5000) select(Math.max(from, a), Math.min(to, b));
  });
  box.append(node);
  return box;
}

// Alerts naming both agents and SLA verdicts of the pair, in [from, to).
async function pairEvents(client, server, from, to) {
  const iso = (t) => new Date(t).toISOString();
  const [alerts, forward, reverse] = await Promise.all([
    api(`/api/v1/alerts?${query({ agent: client, from: iso(from), to: iso(to), limit: 1000 })}`),
    api(`/api/v1/sla/verdicts?${query({ client, server, from: iso(from), to: iso(to), limit: 1000 })}`),
    api(`/api/v1/sla/verdicts?${query({ client: server, server: client, from: iso(from), to: iso(to), limit: 1000 })}`),
  ]);
  const events = alerts.alerts
    .filter((alert) => alert.agents.includes(server))
    .map((alert) => ({
      t: Date.parse(alert.time),
      kind: alert.tags.change === 'path' ? 'path change' : `${alert.severity} alert`,
      level: alert.severity === 'critical' ? 'critical' : alert.severity === 'warning' ? 'warning' : 'ok',
      text: alert.message,
    }));
  for (const verdict of [...forward.verdicts, ...reverse.verdicts]) {
    events.push({
      t: Date.parse(verdict.time),
      kind: `SLA ${verdict.pass ? 'met' : 'breached'}`,
      level: verdict.pass ? 'ok' : 'critical',
      text: `${verdict.contract}, ${verdict.client} → ${verdict.server}: ${verdict.clauses.map((clause) => `${clause.clause} ${format(clause.metric, clause.measured)} (limit ${format(clause.metric, clause.limit)})`).join(', ')}`,
    });
  }
  return events.sort((a, b) => b.t - a.t);
}

// The events on the explorer's time axis, as marks on a strip and a list.
function eventStrip(events, from, to) {
  const width = 640;
  const height = 36;
  const box = el('div', { class: 'chart', id: 'pair-events' }, el('h3', {}, `Alerts, path changes and SLA verdicts (${events.length})`));
  const strip = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': `${events.length} events on the time axis`, class: 'strip' });
  const x = (t) => 64 + ((t - from) / (to - from)) * (width - 72);
  strip.append(svg('line', { class: 'grid-line', x1: 64, x2: width - 8, y1: height / 2, y2: height / 2 }));
  for (const event of events) {
    const mark = svg('circle', { cx: x(event.t), cy: height / 2, r: 5, fill: COLOURS[event.level], stroke: '#000', 'stroke-width': 0.6 });
    const title = svg('title');
    title.textContent = `${new Date(event.t).toLocaleTimeString()} ${event.kind}: ${event.text}`;
    mark.append(title);
    strip.append(mark);
  }
  box.append(strip);
  if (events.length > 0) {
    box.append(el('div', { class: 'table-wrap' }, el('table', {},
      el('tbody', {}, events.slice(0, 20).map((event) => el('tr', {},
        el('td', {}, new Date(event.t).toLocaleTimeString()),
        el('td', {}, stateBadge(event.level === 'ok' ? 'ok' : event.level), ' ', event.kind),
        el('td', {}, event.text)))))));
  }
  return box;
}

// Per-stream bandwidth of every reporting interval of the throughput runs, as an
// empirical CDF (the joint app/network dashboard of Bazan-Antequera et al., Fig. 3).
function streamEcdf(results) {
  const values = results.flatMap((result) => (result.result?.intervals ?? [])
    .filter((interval) => !interval.omitted)
    .flatMap((interval) => interval.streams.map((stream) => stream.bps)))
    .filter((value) => Number.isFinite(value))
    .sort((a, b) => a - b);
  const box = el('div', { class: 'chart', id: 'pair-ecdf' }, el('h3', {}, `Per-stream bandwidth, ECDF (${values.length} stream intervals of ${results.length} throughput runs)`));
  if (values.length === 0) {
    box.append(el('p', { class: 'muted' }, 'No throughput run in this range.'));
    return box;
  }
  const { node, x, y } = plotFrame(`ECDF of ${values.length} per-stream bandwidths, median ${format('x_bps', values[Math.floor(values.length / 2)])}`, {
    xFrom: 0,
    xTo: values[values.length - 1] * 1.05 || 1,
    yTop: 1,
    xLabel: (bps) => format('x_bps', bps),
    yLabel: (share) => share.toFixed(2),
  });
  const steps = values.map((value, index) => `${x(value)},${y(index / values.length)} ${x(value)},${y((index + 1) / values.length)}`);
  node.append(svg('polyline', { class: 'line-forward', points: steps.join(' ') }));
  box.append(node);
  return box;
}

// What the latest results say beyond their metrics: what limited a transfer, and
// one-way delay with the clocks' synchronisation.
function resultNotes(result) {
  const doc = result.result ?? {};
  const notes = [];
  if (doc.limited_by) notes.push(`limited by ${doc.limited_by}`);
  const oneWay = doc.summary?.one_way;
  if (oneWay) {
    notes.push(oneWay.valid
      ? `one-way forward ${format('x_us', doc.summary.forward_us)}, reverse ${format('x_us', doc.summary.reverse_us)} (both clocks synchronised)`
      : 'one-way: not reported (a clock is not synchronised)');
  }
  return notes.join('; ');
}

// An app metric's values in [from, to) as buckets of avg/min/max (at most 240).
function bucketise(points, from, to) {
  const width = (to - from) / 240;
  const buckets = new Map();
  for (const { t, value } of points) {
    const index = Math.floor((t - from) / width);
    const bucket = buckets.get(index) ?? { start_time: new Date(from + index * width).toISOString(), count: 0, sum: 0, min: Infinity, max: -Infinity };
    bucket.count += 1;
    bucket.sum += value;
    bucket.min = Math.min(bucket.min, value);
    bucket.max = Math.max(bucket.max, value);
    buckets.set(index, bucket);
  }
  return [...buckets.entries()].sort((a, b) => a[0] - b[0]).map(([, bucket]) => ({ ...bucket, avg: bucket.sum / bucket.count }));
}

const explorerSettings = { appMetric: '' };

async function pairView(client, server) {
  let range = { span: 3600 };
  const heading = el('h1', {}, `${client} ⇄ ${server}`);
  const controls = el('div', { class: 'controls' });
  const charts = el('div', { class: 'charts' });
  const latest = el('div', {});
  view.replaceChildren(heading, controls, charts, latest);

  async function reload() {
    const to = range.to ?? Date.now();
    const from = range.from ?? to - range.span * 1000;
    controls.replaceChildren(
      ...Object.entries(RANGES).map(([label, span]) => el('button', {
        type: 'button', 'aria-pressed': String(!range.to && range.span === span),
        onclick: () => { range = { span }; reload(); },
      }, `last ${label}`)),
      el('span', { class: 'muted' }, `${new Date(from).toLocaleString()} – ${new Date(to).toLocaleString()} (drag across a chart to zoom)`),
      el('span', { class: 'legend' },
        el('span', {}, el('span', { class: 'swatch', style: 'background:var(--forward)' }), `${client} → ${server}`),
        el('span', {}, el('span', { class: 'swatch', style: 'background:var(--reverse)' }), `${server} → ${client} (dashed)`)),
    );
    const directions = [['forward', client, server], ['reverse', server, client]];
    const iso = (t) => new Date(t).toISOString();
    const answers = await Promise.all(CHARTS.map(({ metric }) => Promise.all(directions.map(([direction, a, b]) =>
      api(`/api/v1/series?${query({ client: a, server: b, metric, from: iso(from), to: iso(to), buckets: 240 })}`)
        .then((answer) => ({ direction, buckets: answer.buckets }))))));
    const select = (a, b) => { range = { from: a, to: b }; reload(); };
    const [events, throughput] = await Promise.all([
      pairEvents(client, server, from, to),
      api(`/api/v1/results?${query({ client, server, test: 'throughput', from: iso(from), to: iso(to), limit: 20, raw: true })}`),
    ]);
    const appInput = el('input', { id: 'app-metric', value: explorerSettings.appMetric, placeholder: 'e.g. video_bitrate', size: 18 });
    const appForm = el('form', { class: 'controls', onsubmit: (event) => { event.preventDefault(); explorerSettings.appMetric = appInput.value.trim(); reload(); } },
      el('label', { for: 'app-metric' }, 'Overlay an app metric', appInput), el('button', { type: 'submit' }, 'Show'));
    const panels = [eventStrip(events, from, to), ...CHARTS.map(({ metric, title }, index) => chart(metric, title, answers[index], from, to, select)), streamEcdf(throughput.results)];
    if (explorerSettings.appMetric) {
      const { metrics } = await api(`/api/v1/app-metrics?${query({ name: explorerSettings.appMetric, from: iso(from), to: iso(to), limit: 100000 })}`);
      const unit = metrics[0]?.unit ?? '';
      const points = metrics.map((metric) => ({ t: Date.parse(metric.timestamp), value: metric.value }));
      panels.push(chart(`app_${unit}`, `App metric ${explorerSettings.appMetric}${unit ? ` (${unit})` : ''}: ${metrics.length} values`, [{ direction: 'forward', buckets: bucketise(points, from, to) }], from, to, select));
    }
    charts.replaceChildren(...panels);
    controls.append(appForm);
    const results = await api(`/api/v1/results?${query({ client, server, limit: 10, raw: true })}`);
    const list = results.results;
    latest.replaceChildren(el('h2', {}, `Latest results ${client} → ${server}`),
      list.length === 0 ? el('p', { class: 'muted' }, 'None yet.') : el('div', { class: 'table-wrap' }, el('table', { id: 'pair-latest' },
        el('thead', {}, el('tr', {}, ['start', 'test', 'outcome', 'metrics', 'notes'].map((h) => el('th', {}, h)))),
        el('tbody', {}, list.map((result) => el('tr', {},
          el('td', {}, new Date(result.start_time).toLocaleTimeString()),
          el('td', {}, result.test),
          el('td', {}, result.outcome === 'completed' ? result.outcome : `${result.outcome}: ${result.error ?? ''}`),
          el('td', {}, Object.entries(result.metrics ?? {}).map(([name, value]) => `${name} ${format(name, value)}`).join(', ')),
          el('td', {}, resultNotes(result))))))));
  }
  try {
    await reload();
  } catch (error) {
    view.append(el('p', { class: 'error', role: 'alert' }, `Cannot load the pair: ${error.message}`));
  }
  const refresh = throttled(() => { if (!range.to) reload().catch(() => {}); }, 3000);
  return onLive((kind, data) => {
    if (kind === 'result' && [client, server].includes(data.client) && [client, server].includes(data.server)) refresh();
  });
}

// ---- view: alerts ----------------------------------------------------------------

const alertSettings = { severity: '' };

async function alertsView() {
  const severity = el('select', { id: 'alerts-severity', onchange: (event) => { alertSettings.severity = event.target.value; reload(); } },
    ['', 'critical', 'warning', 'info'].map((value) => el('option', { value, selected: value === alertSettings.severity }, value || 'all')));
  const body = el('div', {}, el('p', { class: 'muted' }, 'Loading…'));
  view.replaceChildren(el('h1', {}, 'Alerts'), el('div', { class: 'controls' }, el('label', {}, 'Severity', severity)), body);
  async function reload() {
    const { alerts } = await api(`/api/v1/alerts?${query({ severity: alertSettings.severity, limit: 500 })}`);
    body.replaceChildren(
      el('p', {}, `${alerts.length} most recent${alerts.length === 500 ? ' (the newest 500)' : ''}.`),
      el('div', { class: 'table-wrap' }, el('table', { id: 'alerts' },
        el('thead', {}, el('tr', {}, ['time', 'severity', 'message', 'agents'].map((h) => el('th', {}, h)))),
        el('tbody', {}, alerts.map((alert) => el('tr', {},
          el('td', {}, new Date(alert.time).toLocaleString()),
          el('td', {}, stateBadge({ critical: 'critical', warning: 'warning' }[alert.severity] ?? 'ok'), ' ', alert.severity),
          el('td', {}, alert.message),
          el('td', {}, alert.agents.length === 2
            ? el('a', { href: pairLink(alert.agents[0], alert.agents[1]) }, alert.agents.join(' → '))
            : alert.agents.join(', '))))))),
    );
  }
  await reload().catch((error) => body.replaceChildren(el('p', { class: 'error', role: 'alert' }, `Cannot load alerts: ${error.message}`)));
  const refresh = throttled(() => reload().catch(() => {}), 2000);
  return onLive((kind) => { if (kind === 'alert') refresh(); });
}

// ---- view: diagnosis -------------------------------------------------------------

let session = null;
const canChange = () => session && ['admin', 'publisher'].includes(session.role);

async function diagnoseView() {
  const [{ agents }, { jobs }] = await Promise.all([api('/api/v1/agents'), api('/api/v1/diagnose?limit=50')]);
  const names = agents.map((agent) => agent.name).sort();
  const select = (id, chosen) => el('select', { id, name: id, required: true }, names.map((name) => el('option', { value: name, selected: name === chosen }, name)));
  const error = el('p', { class: 'error', role: 'alert', id: 'diagnose-error' });
  const form = el('form', { id: 'diagnose-form', class: 'controls', onsubmit: async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const body = { source: data.get('source'), destination: data.get('destination'), segments: data.get('segments') === 'on' };
    const rate = Number(data.get('rate'));
    const rtt = Number(data.get('rtt'));
    if (data.get('app')) body.app = data.get('app');
    if (rate > 0) body.target_rate_bps = rate * 1e6;
    if (rtt > 0) body.target_rtt_us = rtt * 1000;
    try {
      const job = await api('/api/v1/diagnose', { method: 'POST', body });
      location.hash = `#/diagnose/${encodeURIComponent(job.id)}`;
    } catch (failure) {
      error.textContent = failure.message;
    }
  } },
  el('label', {}, 'Source', select('source', names[0])),
  el('label', {}, 'Destination', select('destination', names[1])),
  el('label', {}, 'App profile (optional)', el('input', { name: 'app', placeholder: 'youtube-1080p', size: 16 })),
  el('label', {}, 'Target rate, Mbit/s', el('input', { name: 'rate', type: 'number', min: '0', step: 'any', size: 8 })),
  el('label', {}, 'Target RTT, ms', el('input', { name: 'rtt', type: 'number', min: '0', step: 'any', size: 8 })),
  el('label', { class: 'inline' }, el('input', { type: 'checkbox', name: 'segments', id: 'diagnose-segments', checked: true }), 'also each segment between the agents on the path'),
  el('button', { type: 'submit', disabled: !canChange() }, 'Diagnose'));
  view.replaceChildren(
    el('h1', {}, 'Diagnosis'),
    el('p', {}, 'Traces the path, measures it end to end and segment by segment between the agents on it, and names the likely bottleneck with its evidence (pathdiag, Mathis et al., PAM 2008).'),
    canChange() ? null : el('p', { class: 'muted', id: 'diagnose-read-only' }, 'You signed in read-only: starting a diagnosis needs an admin token.'),
    form, error,
    el('h2', {}, 'Recent'),
    jobs.length === 0 ? el('p', { class: 'muted' }, 'No diagnosis yet.') : el('div', { class: 'table-wrap' }, el('table', { id: 'diagnose-jobs' },
      el('thead', {}, el('tr', {}, ['started', 'pair', 'state', 'verdict'].map((h) => el('th', {}, h)))),
      el('tbody', {}, jobs.map((job) => el('tr', {},
        el('td', {}, new Date(job.created_at).toLocaleString()),
        el('td', {}, el('a', { href: `#/diagnose/${encodeURIComponent(job.id)}` }, `${job.request.source} → ${job.request.destination}`)),
        el('td', {}, job.state),
        el('td', {}, job.result?.verdict ?? job.error ?? '')))))),
  );
}

async function diagnosisJobView(id) {
  view.replaceChildren(el('h1', {}, 'Diagnosis'), el('p', { class: 'muted' }, 'Loading…'));
  async function reload() {
    const job = await api(`/api/v1/diagnose/${encodeURIComponent(id)}`);
    const result = job.result;
    const parts = [
      el('h1', {}, `Diagnosis ${job.request.source} → ${job.request.destination}`),
      el('p', { id: 'diagnosis-state' }, stateBadge({ running: 'unknown', done: 'ok', failed: 'critical' }[job.state]), ` ${job.state}`, job.error ? `: ${job.error}` : ''),
      el('h2', {}, 'Progress'),
      el('ol', { id: 'diagnosis-progress' }, job.progress.map((line) => el('li', {}, line))),
    ];
    if (result) {
      const target = result.target;
      parts.push(
        el('h2', {}, 'Verdict'),
        el('p', { id: 'diagnosis-verdict' }, stateBadge({ healthy: 'ok', degraded: 'warning', unreachable: 'critical' }[result.verdict] ?? 'unknown'), ` ${result.verdict}`,
          target.forward_bps !== undefined ? `: forward ${format('x_bps', target.forward_bps)}` : '',
          target.reverse_bps !== undefined ? `, reverse ${format('x_bps', target.reverse_bps)}` : '',
          target.rtt_us !== undefined ? `, RTT ${format('x_us', target.rtt_us)}` : '',
          target.met === undefined ? '' : target.met ? ' (target met)' : ' (target not met)'),
        el('p', {}, `Measurement points: ${target.path.join(' → ')}`),
        result.suspects.length === 0 ? el('p', {}, 'No suspect: nothing on the path looks limiting.') : el('ol', { id: 'diagnosis-suspects' }, result.suspects.map((suspect) => el('li', {},
          el('strong', {}, `${suspect.cause} at ${suspect.segment}, ${suspect.direction}`), ` (confidence ${suspect.confidence.toFixed(2)})`,
          el('div', { class: 'table-wrap' }, el('table', {},
            el('thead', {}, el('tr', {}, ['', 'test', 'metric', 'value', 'expected', 'run'].map((h) => el('th', {}, h)))),
            el('tbody', {}, suspect.evidence.map((evidence) => el('tr', {},
              el('td', {}, evidence.supports ? 'for' : 'against'),
              el('td', {}, evidence.test), el('td', {}, evidence.metric),
              el('td', { class: 'num' }, format(evidence.metric, evidence.value)),
              el('td', {}, evidence.expected),
              el('td', {}, evidence.run_id ?? '—')))))),
          el('p', {}, `Fix: ${suspect.fix}`)))),
        el('h2', {}, 'Runs'),
        el('div', { class: 'table-wrap' }, el('table', { id: 'diagnosis-runs' },
          el('thead', {}, el('tr', {}, ['test', 'pair', 'run', 'outcome'].map((h) => el('th', {}, h)))),
          el('tbody', {}, result.tests_run.map((run) => el('tr', {},
            el('td', {}, run.test),
            el('td', {}, el('a', { href: pairLink(run.client, run.server) }, `${run.client} → ${run.server}`)),
            el('td', {}, run.run_id), el('td', {}, run.outcome)))))),
      );
    }
    view.replaceChildren(...parts);
    return job.state;
  }
  let state = await reload().catch((error) => {
    view.replaceChildren(el('h1', {}, 'Diagnosis'), el('p', { class: 'error', role: 'alert' }, `Cannot load diagnosis '${id}': ${error.message}`));
    return 'failed';
  });
  // Each step arrives as a `diagnosis` event; a slow poll covers a missed one.
  const refresh = throttled(async () => { state = await reload().catch(() => state); }, 500);
  const timer = setInterval(() => { if (state === 'running') refresh(); }, 5000);
  const unsubscribe = onLive((kind, data) => { if (kind === 'diagnosis' && data.id === id) refresh(); });
  return () => { clearInterval(timer); unsubscribe(); };
}

// ---- sign-in and routing ---------------------------------------------------------

let leaveView = null;

async function route() {
  if (leaveView) { leaveView(); leaveView = null; }
  const [name, ...rest] = (location.hash.replace(/^#\/?/, '') || 'grid').split('/');
  for (const link of document.querySelectorAll('nav a')) {
    if (link.dataset.view === name) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  const views = {
    grid: gridView,
    heatmap: heatmapView,
    agents: agentsView,
    schedule: scheduleView,
    alerts: alertsView,
    diagnose: () => (rest[0] ? diagnosisJobView(decodeURIComponent(rest[0])) : diagnoseView()),
    pair: () => pairView(decodeURIComponent(rest[0] ?? ''), decodeURIComponent(rest[1] ?? '')),
  };
  const show = views[name] ?? (() => { view.replaceChildren(el('h1', {}, 'Not found'), el('p', {}, `No view '${name}'.`)); });
  document.title = `vantage — ${name}`;
  leaveView = (await show()) ?? null;
}

function showSignIn(message) {
  view.replaceChildren(document.getElementById('sign-in-form').content.cloneNode(true));
  const form = document.getElementById('sign-in');
  document.getElementById('sign-in-error').textContent = message ?? '';
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      await signIn(form.token.value);
    } catch (error) {
      document.getElementById('sign-in-error').textContent = error.message;
    }
  });
  form.token.focus();
}

async function signIn(token) {
  await start(await api('/api/v1/session', { method: 'POST', body: { token } }));
}

async function start(signedIn) {
  session = signedIn;
  document.getElementById('who').textContent = `${session.name} (${session.role === 'reader' ? 'read-only' : session.role})`;
  document.getElementById('nav').hidden = false;
  const signOut = document.getElementById('sign-out');
  signOut.hidden = false;
  signOut.onclick = async () => {
    await api('/api/v1/session', { method: 'DELETE' });
    location.hash = '';
    location.reload();
  };
  connectLive();
  window.addEventListener('hashchange', route);
  if (!location.hash.startsWith('#/')) history.replaceState(null, '', '#/grid');
  await route();
}

// A sign-in link carries its token in the fragment, which browsers never send to a
// server; it is exchanged for the session cookie and removed from the address bar.
async function boot() {
  const link = location.hash.match(/^#token=([^&]+)/);
  if (link) {
    history.replaceState(null, '', location.pathname);
    try {
      await signIn(decodeURIComponent(link[1]));
    } catch (error) {
      showSignIn(`The sign-in link did not work: ${error.message}`);
    }
    return;
  }
  try {
    await start(await api('/api/v1/session'));
  } catch (error) {
    showSignIn(error.status === 401 ? '' : error.message);
  }
}

boot();
