// Charts as SVG built element by element (no inline style, no library). Every chart has a text
// alternative (aria-label and a data table) so that nothing is conveyed by colour alone.

import { h, s, num, percent, when } from './dom.js';

/** A horizontal budget bar: spent against total, with the figures written beside it. */
export function budgetBar(spent, total, label) {
  const fraction = total > 0 ? Math.min(1, Math.max(0, spent / total)) : 0;
  const level = fraction >= 0.9 ? 'critical' : fraction >= 0.6 ? 'warning' : 'ok';
  const text = `${label}: ${num(spent)} of ${num(total)} spent (${percent(spent, total)}), ${num(Math.max(0, total - spent))} left`;
  return s('svg', {
    class: ['budget-bar', `level-${level}`], viewBox: '0 0 100 10', preserveAspectRatio: 'none',
    role: 'img', 'aria-label': text,
  },
  s('title', {}, text),
  s('rect', { class: 'track', x: 0, y: 0, width: 100, height: 10, rx: 2 }),
  s('rect', { class: 'fill', x: 0, y: 0, width: (100 * fraction).toFixed(3), height: 10, rx: 2 }));
}

/** `text` cut to `chars` characters, an ellipsis marking the cut (the full text is in titles). */
function fit(text, chars) {
  const all = [...String(text)];
  return all.length <= chars ? all.join('') : `${all.slice(0, Math.max(1, chars - 1)).join('')}…`;
}

/** About this many pixels per character at the charts' 11 px font. */
const CHAR_PX = 6.2;

function maxOf(values) {
  let m = 1e-12;
  for (const v of values) if (v > m) m = v;
  return m;
}

function ticks(max, count = 4) {
  if (!(max > 0)) return [0];
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((m) => m >= raw);
  const out = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

function timeLabel(t, span) {
  const d = new Date(t);
  if (span < 2 * 86400e3) return d.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', second: span < 600e3 ? '2-digit' : undefined });
  return d.toLocaleDateString('en-GB', { month: 'short', day: 'numeric' });
}

/**
 * Cumulative spend as a step line: `before` (what older releases not in `releases` spent; 0
 * when the list is complete) at `start`, one step up by each release's cost at its
 * `created_at`, flat to `end`; the budget's total as a dashed horizontal rule.
 */
export function spendChart({ releases, total, start, end, order, before = 0 }) {
  const W = 720; const H = 260;
  const m = { l: 56, r: 16, t: 16, b: 40 };
  const points = [];
  let cumulative = before;
  for (const r of releases) {
    cumulative += r.cost.epsilon;
    points.push({ t: Date.parse(r.created_at), y: cumulative, seq: r.seq, cost: r.cost.epsilon });
  }
  const t0 = Math.min(Date.parse(start), ...points.map((p) => p.t));
  const t1 = Math.max(end, t0 + 1000, ...points.map((p) => p.t));
  const yMax = Math.max(total, cumulative) * 1.08 || 1;
  const x = (t) => m.l + ((t - t0) / (t1 - t0)) * (W - m.l - m.r);
  const y = (v) => H - m.b - (v / yMax) * (H - m.t - m.b);
  let d = `M${x(t0).toFixed(1)},${y(before).toFixed(1)}`;
  let last = before;
  for (const p of points) {
    d += ` H${x(p.t).toFixed(1)} V${y(p.y).toFixed(1)}`;
    last = p.y;
  }
  d += ` H${x(t1).toFixed(1)}`;
  const summary = `Cumulative spend at order λ = ${num(order)}: ${num(last)} of ${num(total)} after ${points.length} release${points.length === 1 ? '' : 's'}`;
  const grid = ticks(yMax * 0.999).map((v) => s('g', { class: 'tick' },
    s('line', { x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }),
    s('text', { x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, num(v, 3))));
  const xTicks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const t = t0 + f * (t1 - t0);
    return s('text', { class: 'axis-label', x: x(t), y: H - m.b + 18, 'text-anchor': f === 0 ? 'start' : f === 1 ? 'end' : 'middle' }, timeLabel(t, t1 - t0));
  });
  const svg = s('svg', {
    class: 'chart spend-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': summary,
    'data-points': points.length, 'data-spent': last,
  },
  s('title', {}, summary),
  ...grid,
  s('line', { class: 'axis', x1: m.l, x2: m.l, y1: m.t, y2: H - m.b }),
  s('line', { class: 'axis', x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b }),
  ...xTicks,
  s('text', { class: 'axis-label', x: 14, y: m.t + (H - m.t - m.b) / 2, transform: `rotate(-90 14 ${m.t + (H - m.t - m.b) / 2})`, 'text-anchor': 'middle' }, `ε spent (λ = ${num(order)})`),
  s('line', { class: 'total-rule', x1: m.l, x2: W - m.r, y1: y(total), y2: y(total) }),
  s('text', { class: 'total-label', x: W - m.r - 4, y: y(total) - 6, 'text-anchor': 'end' }, `budget ${num(total)}`),
  s('path', { class: 'spend-line', d }),
  ...points.map((p) => s('circle', { class: 'spend-point', cx: x(p.t), cy: y(p.y), r: 3.5 },
    s('title', {}, `release #${p.seq}: +${num(p.cost)} → ${num(p.y)} at ${when(new Date(p.t).toISOString())}`))));
  return h('figure', { class: 'chart-figure' }, svg,
    h('figcaption', {}, summary, '. The dashed line is the budget.'));
}

/**
 * Spend per block of a dataset split into blocks: one bar per block of `items` (the blocks
 * listing, in order), its height the block's spend, and the cap every block shares as a dashed
 * rule. A full block (no room for anything) is drawn as critical.
 */
export function blockStrip(items, caption) {
  const W = 720; const H = 220;
  const m = { l: 48, r: 12, t: 18, b: 42 };
  const n = items.length;
  const cap = items[0]?.total ?? 0;
  const vMax = Math.max(cap, maxOf(items.map((b) => b.spent))) * 1.1 || 1;
  const band = (W - m.l - m.r) / Math.max(n, 1);
  const y = (v) => H - m.b - (v / vMax) * (H - m.t - m.b);
  const every = Math.ceil(n / 12);
  const labelChars = Math.max(2, Math.floor((band * every - 4) / CHAR_PX));
  const bars = items.map((b, i) => {
    const level = b.remaining <= 0 ? 'critical' : b.spent >= 0.6 * b.total ? 'warning' : 'ok';
    return s('g', { class: ['bar', 'block-bar', `level-${level}`], 'data-key': b.key, 'data-spent': b.spent },
      s('rect', { x: m.l + i * band + band * 0.1, y: y(b.spent), width: Math.max(band * 0.8, 0.5), height: Math.max(0, y(0) - y(b.spent)) },
        s('title', {}, `${b.key}: ${num(b.spent)} of ${num(b.total)} spent, ${num(b.remaining)} left`)),
      i % every === 0 ? s('text', { class: 'axis-label', x: m.l + (i + 0.5) * band, y: H - m.b + 16, 'text-anchor': 'middle' }, fit(b.key, labelChars)) : null);
  });
  const grid = ticks(vMax * 0.999).map((v) => s('g', { class: 'tick' },
    s('line', { x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }),
    s('text', { x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, num(v, 2))));
  const full = items.filter((b) => b.remaining <= 0).length;
  const summary = caption || `Spend per block, ${items[0]?.key ?? ''} to ${items[n - 1]?.key ?? ''}: ${full} of ${n} blocks full`;
  return h('figure', { class: 'chart-figure' },
    s('svg', { class: 'chart block-strip', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': summary, 'data-blocks': n },
      s('title', {}, summary), ...grid,
      s('line', { class: 'axis', x1: m.l, x2: W - m.r, y1: y(0), y2: y(0) }), ...bars,
      s('line', { class: 'total-rule', x1: m.l, x2: W - m.r, y1: y(cap), y2: y(cap) }),
      s('text', { class: 'total-label', x: W - m.r - 4, y: y(cap) - 6, 'text-anchor': 'end' }, `cap ${num(cap)} per block`)),
    h('figcaption', {}, summary, '. The dashed line is each block\'s cap.'),
    dataTable(['block', 'spent', 'cap', 'left'], items.map((b) => [b.key, num(b.spent), num(b.total), num(b.remaining)])));
}

/**
 * A distribution as bars (values in [0, 1]); at most 24 bars carry an axis label, cut to the
 * room they have (each bar's title and the data table give the full name).
 */
export function barChart(values, labels, caption) {
  const W = 720; const H = 240;
  const m = { l: 48, r: 12, t: 18, b: 42 };
  const n = values.length;
  const vMax = maxOf(values) * 1.1;
  const band = (W - m.l - m.r) / Math.max(n, 1);
  const y = (v) => H - m.b - (v / vMax) * (H - m.t - m.b);
  const showValues = n <= 24;
  const every = Math.ceil(n / 24);
  const labelChars = Math.max(2, Math.floor((band * every - 4) / CHAR_PX));
  const bars = values.map((v, i) => {
    const name = labels?.[i] ?? `cell ${i}`;
    return s('g', { class: 'bar' },
      s('rect', { x: m.l + i * band + band * 0.1, y: y(v), width: Math.max(band * 0.8, 0.5), height: Math.max(0, y(0) - y(v)) },
        s('title', {}, `${name}: ${num(v)}`)),
      showValues ? s('text', { class: 'bar-value', x: m.l + (i + 0.5) * band, y: y(v) - 4, 'text-anchor': 'middle' }, num(v, 2)) : null,
      i % every === 0 ? s('text', { class: 'axis-label', x: m.l + (i + 0.5) * band, y: H - m.b + 16, 'text-anchor': 'middle' }, fit(labels?.[i] ?? i, labelChars)) : null);
  });
  const grid = ticks(vMax * 0.999).map((v) => s('g', { class: 'tick' },
    s('line', { x1: m.l, x2: W - m.r, y1: y(v), y2: y(v) }),
    s('text', { x: m.l - 6, y: y(v) + 4, 'text-anchor': 'end' }, num(v, 2))));
  const summary = caption || `A distribution over ${n} cells`;
  return h('figure', { class: 'chart-figure' },
    s('svg', { class: 'chart bar-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': summary, 'data-cells': n },
      s('title', {}, summary), ...grid,
      s('line', { class: 'axis', x1: m.l, x2: W - m.r, y1: y(0), y2: y(0) }), ...bars),
    h('figcaption', {}, summary),
    dataTable([labels ? 'label' : 'cell', 'probability'], values.map((v, i) => [labels?.[i] ?? i, num(v)])));
}

/**
 * A table of distributions (rows) as a heat map; each cell also prints its value when there is
 * room. `rowLabels` and `colLabels` name the rows and cells (numbers when absent).
 */
export function heatMap(rows, caption, { rowLabels, colLabels } = {}) {
  const nRows = rows.length;
  const nCols = Math.max(...rows.map((r) => r.length), 1);
  const rowName = (i) => String(rowLabels?.[i] ?? `row ${i}`);
  const colName = (j) => String(colLabels?.[j] ?? j);
  const cell = Math.max(10, Math.min(56, Math.floor(640 / nCols)));
  const rowH = Math.max(14, Math.min(30, cell));
  const longest = Math.max(...rows.map((_, i) => fit(rowName(i), 16).length));
  // Column labels: every one up to 24 columns, then evenly spaced. Names wider than their
  // column are written at 45° (up to 24 characters) rather than cut to a few letters.
  const stride = nCols <= 24 ? 1 : Math.ceil(nCols / 24);
  const labelled = Array.from({ length: nCols }, (_, j) => j).filter((j) => j % stride === 0);
  const flatChars = Math.max(2, Math.floor((cell * stride - 4) / CHAR_PX));
  const widest = Math.max(...labelled.map((j) => [...colName(j)].length));
  const slanted = colLabels && widest > flatChars;
  const rise = slanted ? Math.ceil(Math.min(widest, 24) * CHAR_PX * Math.SQRT1_2) : 0;
  const m = { l: Math.max(56, 7 * longest + 12), t: 24 + rise };
  const W = m.l + nCols * cell + 12 + rise; const H = m.t + nRows * rowH + 8;
  const vMax = maxOf(rows.map(maxOf));
  const showValues = cell >= 40;
  const shade = (v) => Math.min(8, Math.floor((v / vMax) * 9));
  const summary = caption || `A table of ${nRows} distributions over ${nCols} cells`;
  const cells = [];
  rows.forEach((row, i) => row.forEach((v, j) => {
    cells.push(s('g', {},
      s('rect', { class: `heat heat-${shade(v)}`, x: m.l + j * cell, y: m.t + i * rowH, width: cell - 1, height: rowH - 1 },
        s('title', {}, `${rowName(i)}, ${colName(j)}: ${num(v)}`)),
      showValues ? s('text', { class: ['heat-value', shade(v) >= 5 ? 'on-dark' : ''], x: m.l + j * cell + cell / 2, y: m.t + i * rowH + rowH / 2 + 4, 'text-anchor': 'middle' }, num(v, 2)) : null));
  }));
  const rowText = rows.map((_, i) => s('text', { class: 'axis-label row-label', x: m.l - 6, y: m.t + i * rowH + rowH / 2 + 4, 'text-anchor': 'end' }, fit(rowName(i), 16)));
  const colText = labelled.map((j) => {
    const x = m.l + j * cell + cell / 2;
    return slanted
      ? s('text', { class: 'axis-label col-label', x: x - 3, y: m.t - 6, 'text-anchor': 'start', transform: `rotate(-45 ${x - 3} ${m.t - 6})` }, fit(colName(j), 24))
      : s('text', { class: 'axis-label col-label', x, y: m.t - 8, 'text-anchor': 'middle' }, fit(colName(j), flatChars));
  });
  return h('figure', { class: 'chart-figure' },
    s('svg', { class: 'chart heat-map', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': summary, 'data-rows': nRows },
      s('title', {}, summary), ...rowText, ...colText, ...cells),
    h('figcaption', {}, summary, '. Darker is larger.'),
    dataTable(['row', ...Array.from({ length: nCols }, (_, j) => colLabels?.[j] ?? `cell ${j}`)],
      rows.map((r, i) => [rowLabels ? rowName(i) : i, ...r.map((v) => num(v))])));
}

function dataTable(head, body) {
  const shown = body.slice(0, 500);
  return h('details', { class: 'data-table' },
    h('summary', {}, 'Show the numbers'),
    h('div', { class: 'table-scroll' },
      h('table', {},
        h('thead', {}, h('tr', {}, head.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, shown.map((row) => h('tr', {}, row.map((c) => h('td', {}, c))))))),
    body.length > shown.length ? h('p', { class: 'muted' }, `First ${shown.length} of ${body.length} rows.`) : null);
}
