// The console: a hash-routed single page over the public API (see api.js for the token rules).
//   #/                   datasets
//   #/datasets/<id>      one dataset: spend over time, allocations, plan, preview and
//                        release, releases, outputs
//   #/new-dataset        register a dataset (admin)
//   #/new-token          create an analyst token (admin)
//   #/populations        the population tree, its forms (admin; populations.js)

import { call, allReleases, mechanisms, session, saveSession, clearSession, Problem } from './api.js';
import { h, num, percent, when, clear, id } from './dom.js';
import { budgetBar, spendChart, barChart, heatMap, blockStrip } from './charts.js';
import { renderPopulations, budgetPath } from './populations.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const status = document.getElementById('status');

const PAGE = 10;
/** Outputs with more cells than this are drawn in part (the numbers stay available). */
const MAX_DRAWN_CELLS = 2000;

// ------------------------------------------------------------------ shared pieces

function announce(message) {
  status.textContent = message;
}

/** Whether a problem is of the service's type `slug` (`/problems/<slug>`). */
function isProblem(p, slug) {
  return p.type === `/problems/${slug}` || p.type.endsWith(`/problems/${slug}`);
}

const isLedger = (x) => x !== null && typeof x === 'object' && typeof x.remaining === 'number';

/**
 * What a refused release had to fit, from the problem's members: the analyst's own allocation
 * (allocation-exhausted: the dataset may still have room) or the dataset's budget.
 */
function ledgerRefusal(p) {
  const { allocation, budget } = p.body;
  if (isProblem(p, 'allocation-exhausted') && isLedger(allocation)) {
    return h('div', { class: 'problem-ledger' },
      budgetBar(allocation.spent, allocation.epsilon, 'Your allocation on this dataset'),
      h('p', {}, h('strong', {}, 'Your allocation: '), `${num(allocation.remaining)} of ${num(allocation.epsilon)} left`,
        isLedger(budget) ? `, while the dataset's budget still has ${num(budget.remaining)} of ${num(budget.total)} left. ` : '. ',
        'The admin can raise your allocation; nothing was charged.'));
  }
  if (isProblem(p, 'population-budget-exhausted') && isLedger(budget)) {
    return h('div', { class: 'problem-ledger' },
      budgetBar(budget.spent, budget.total, 'The refusing population'),
      h('p', {}, h('strong', {}, 'The population above the dataset: '), `${num(budget.remaining)} of ${num(budget.total)} left at λ = ${num(budget.order)}`,
        ', while the dataset itself may still have room. Nothing was charged.'));
  }
  if (isProblem(p, 'budget-exhausted') && isLedger(budget)) {
    return h('div', { class: 'problem-ledger' },
      h('p', {}, h('strong', {}, "The dataset's budget: "), `${num(budget.remaining)} of ${num(budget.total)} left at λ = ${num(budget.order)}. Nothing was charged.`));
  }
  return null;
}

/** A problem+json error as the user sees it: its title, its detail, and the status. */
function problemBox(error) {
  const p = error instanceof Problem ? error : new Problem(0, { title: 'Unexpected error', detail: String(error?.message || error) });
  const kind = isProblem(p, 'allocation-exhausted') ? 'allocation-exhausted'
    : isProblem(p, 'population-budget-exhausted') ? 'population-budget-exhausted'
      : isProblem(p, 'budget-exhausted') ? 'budget-exhausted' : null;
  return h('div', { class: ['problem', kind], role: 'alert', 'data-status': p.status, 'data-type': p.type },
    h('p', { class: 'problem-title' }, h('span', { class: 'problem-icon', 'aria-hidden': 'true' }, '⚠ '), p.title),
    p.detail ? h('p', { class: 'problem-detail' }, p.detail) : null,
    typeof p.body.field === 'string' ? h('p', { class: 'problem-field' }, 'Field: ', h('code', {}, p.body.field)) : null,
    ledgerRefusal(p),
    h('p', { class: 'problem-meta' }, p.status ? `HTTP ${p.status}` : 'no response', p.type ? ` · ${p.type}` : ''));
}

/** A success message that can take the focus (after its control went away). */
function successBox(text) {
  return h('p', { class: 'success', role: 'status', tabindex: '-1' }, h('span', { 'aria-hidden': 'true' }, '✓ '), text);
}

function field(label, control, hint) {
  const controlId = control.id || id('field');
  control.id = controlId;
  const hintId = hint ? `${controlId}-hint` : null;
  if (hintId) control.setAttribute('aria-describedby', hintId);
  return h('div', { class: 'field' },
    h('label', { for: controlId }, label),
    control,
    hint ? h('p', { class: 'hint', id: hintId }, hint) : null);
}

function numberInput(attrs) {
  return h('input', { type: 'number', step: 'any', inputmode: 'decimal', ...attrs });
}

/** A key of each block period, as the service writes them (UTC). */
const BLOCK_EXAMPLE = { hour: '2026-12-05T13', day: '2026-12-05', week: '2026-W49', month: '2026-12' };

/**
 * The block `steps` periods after `key` (before it when negative), for choosing what the block
 * strip shows; a key that does not parse gives null (the service refuses it with its reason).
 */
function shiftBlock(period, key, steps) {
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  const day = (t) => `${pad(t.getUTCFullYear(), 4)}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())}`;
  if (period === 'month') {
    const m = /^(\d{4})-(\d{2})$/.exec(key);
    if (!m) return null;
    const months = Number(m[1]) * 12 + Number(m[2]) - 1 + steps;
    return `${pad(Math.floor(months / 12), 4)}-${pad((months % 12) + 1)}`;
  }
  if (period === 'week') {
    const m = /^(\d{4})-W(\d{2})$/.exec(key);
    if (!m) return null;
    // ISO week 1 holds 4 January; its Monday, then whole weeks.
    const jan4 = Date.UTC(Number(m[1]), 0, 4);
    const monday = jan4 - ((new Date(jan4).getUTCDay() + 6) % 7) * 86400e3;
    const t = new Date(monday + ((Number(m[2]) - 1 + steps) * 7) * 86400e3);
    const thursday = new Date(t.getTime() + 3 * 86400e3);
    const year = thursday.getUTCFullYear();
    const yJan4 = Date.UTC(year, 0, 4);
    const week1 = yJan4 - ((new Date(yJan4).getUTCDay() + 6) % 7) * 86400e3;
    return `${pad(year, 4)}-W${pad(Math.round((t.getTime() - week1) / (7 * 86400e3)) + 1)}`;
  }
  const m = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}))?$/.exec(key);
  if (!m || (period === 'hour') !== (m[4] !== undefined)) return null;
  const hours = period === 'hour' ? steps : steps * 24;
  const t = new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4] ?? 0)) + hours * 3600e3);
  return period === 'hour' ? `${day(t)}T${pad(t.getUTCHours())}` : day(t);
}

/**
 * Spend per block of a blocked dataset: a range chosen by the user (by default the 30 blocks
 * around the most-spent one), drawn as a bar strip with the cap marked.
 */
function blocksPanel(dataset) {
  const period = dataset.blocks.period;
  const from = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: BLOCK_EXAMPLE[period] });
  const to = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: BLOCK_EXAMPLE[period] });
  const slot = h('div', { 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'secondary' }, 'Show');
  const show = async () => {
    clear(slot);
    if (from.value.trim() === '' || to.value.trim() === '') {
      slot.append(h('p', { class: 'muted' }, 'No block has been charged yet.'));
      return;
    }
    try {
      const query = new URLSearchParams({ from: from.value.trim(), to: to.value.trim() });
      const list = await call('GET', `/v1/datasets/${dataset.id}/blocks?${query}`);
      slot.append(blockStrip(list.items));
    } catch (error) {
      slot.append(problemBox(error));
    }
  };
  const form = h('form', { class: 'block-range', novalidate: true },
    field('From', from), field('To', to), h('div', { class: 'actions' }, button));
  form.addEventListener('submit', async (event) => { event.preventDefault(); await show(); });
  const element = section(`Spend per ${period}`,
    h('p', { class: 'hint' }, `Each ${period} of records has its own cap; a release is charged on every ${period} it reads.`),
    form, slot);
  /** Reloads the strip; the first time, around the most-spent block of `budget`. */
  const reload = async (budget) => {
    const most = budget?.blocks?.most_spent?.key;
    if (from.value.trim() === '' && most) {
      to.value = shiftBlock(period, most, 15) ?? most;
      from.value = shiftBlock(period, most, -14) ?? most;
    }
    await show();
  };
  return { element, reload };
}

function section(title, ...children) {
  const headingId = id('h');
  return h('section', { class: 'card', 'aria-labelledby': headingId },
    h('h2', { id: headingId }, title), ...children);
}

function busy(button, on) {
  button.disabled = on;
  button.setAttribute('aria-busy', on ? 'true' : 'false');
}

/** The total and remaining budget of a dataset view, on the ledger grid. */
function ledgerTotal(dataset) {
  return dataset.budget.rdp_epsilon ?? dataset.budget.epsilon;
}

/**
 * A dataset's budget as bars: the RDP budget, its (ε, δ) view, and the calling analyst's own
 * allocation when the admin set one. `own` (the dataset page) also says when an analyst has none.
 */
function budgetSummary(dataset, budget, { own = false } = {}) {
  // Split into blocks: each block has the cap, the fullest one binds first; the dataset's own
  // ledger only sums what every release cost.
  const blocks = budget.blocks;
  const rows = blocks ? [
    h('div', { class: 'budget-line' },
      budgetBar(blocks.most_spent?.spent ?? 0, blocks.total, `The fullest ${blocks.period} at order λ = ${num(budget.order)}`),
      h('p', { class: 'budget-text' },
        h('strong', {}, `${num(blocks.total)} per ${blocks.period}`),
        blocks.most_spent
          ? ` · the fullest, ${blocks.most_spent.key}, has ${num(blocks.most_spent.remaining)} left`
          : ' · nothing charged yet',
        h('span', { class: 'muted' }, ` (${num(budget.spent)} charged in all, over every ${blocks.period})`))),
  ] : [
    h('div', { class: 'budget-line' },
      budgetBar(budget.spent, budget.total, `Rényi-DP budget at order λ = ${num(budget.order)}`),
      h('p', { class: 'budget-text' },
        h('strong', {}, `${num(budget.spent)} of ${num(budget.total)}`), ` spent at λ = ${num(budget.order)} `,
        h('span', { class: 'muted' }, `(${percent(budget.spent, budget.total)}; ${num(budget.remaining)} left)`))),
  ];
  if (budget.dp) {
    rows.push(h('div', { class: 'budget-line' },
      budgetBar(budget.dp.spent_epsilon, budget.dp.total_epsilon, `(ε, δ) view at δ = ${budget.dp.delta}`),
      h('p', { class: 'budget-text' },
        h('strong', {}, `ε ${num(budget.dp.spent_epsilon)} of ${num(budget.dp.total_epsilon)}`),
        ` spent at δ = ${budget.dp.delta}`)));
  }
  const allocation = budget.allocation;
  if (isLedger(allocation)) {
    rows.push(h('div', { class: 'budget-line allocation-line' },
      budgetBar(allocation.spent, allocation.epsilon, `Your allocation at λ = ${num(budget.order)}`),
      h('p', { class: 'budget-text' },
        h('strong', {}, `${num(allocation.spent)} of your ${num(allocation.epsilon)}`), ' allocation spent ',
        h('span', { class: 'muted' }, `(${num(allocation.remaining)} left; a release must fit it and the dataset's budget)`))));
  } else if (own && session()?.role === 'analyst') {
    rows.push(h('p', { class: 'budget-text allocation-none muted' },
      "No allocation of your own: your releases draw on the dataset's budget."));
  }
  return h('div', { class: 'budget-summary' }, rows);
}

/** An external charge's events (`composed`): each mechanism with its count. */
function eventsText(events) {
  return `${events.length} events: ${events.map((e) => `${e?.mechanism ?? '?'}${e?.count > 1 ? ` ×${e.count}` : ''}`).join(', ')}`;
}

function mechanismParameters(mechanism) {
  const parts = [];
  const external = mechanism?.kind === 'external';
  for (const [key, value] of Object.entries(mechanism || {})) {
    if (key === 'kind' || (external && key === 'mechanism')) continue;
    if (key === 'events' && Array.isArray(value)) {
      parts.push(eventsText(value));
      continue;
    }
    if (key === 'calibration' && value && typeof value === 'object') {
      parts.push(`calibrated to ε ${num(value.epsilon)} at λ ${num(value.order)}`);
    } else if (Array.isArray(value)) {
      parts.push(value.length <= 4 ? `${key} = [${value.map((v) => num(v, 3)).join(', ')}]` : `${key} = per cell (${value.length})`);
    } else if (typeof value === 'number') {
      parts.push(`${key} = ${num(value)}`);
    } else if (value !== null && typeof value !== 'object') {
      parts.push(`${key} = ${value}`);
    }
  }
  return parts.join(', ');
}

/**
 * The names that label a release's output: the dataset's cell names (a release and a listing
 * page carry them as `cells`) and the release's stored `row_names`; failing those, what was
 * pasted with the counts (`pasted`: a header line the service never sees, so only the release
 * just made has it).
 */
function outputNames(release, datasetCells, pasted) {
  return {
    cells: release.cells ?? datasetCells ?? pasted?.cells ?? null,
    rows: release.row_names ?? pasted?.rows ?? null,
  };
}

/**
 * A release's output: a distribution as bars, or (a `table` release) its distributions as a
 * heat map. `names` ({ cells, rows }, either may be null, see `outputNames`) label them.
 */
function outputChart(release, names) {
  const rows = Array.isArray(release.distributions) ? release.distributions : null;
  const title = `Release #${release.seq}${release.label ? ` “${release.label}”` : ''}`;
  if (rows) {
    const shown = rows.slice(0, 100).map((r) => r.slice(0, 200));
    const partial = shown.length < rows.length || rows.some((r) => r.length > 200);
    return heatMap(shown, `${title}: ${rows.length} distributions over ${rows[0]?.length ?? 0} cells${partial ? ' (first 100 rows, 200 cells drawn)' : ''}`,
      { rowLabels: names?.rows, colLabels: names?.cells });
  }
  const values = release.distribution || [];
  const shown = values.slice(0, MAX_DRAWN_CELLS);
  return barChart(shown, names?.cells ?? null, `${title}: a distribution over ${values.length} cells${shown.length < values.length ? ` (first ${shown.length} drawn)` : ''}`);
}

/** A preview forecast's members this console words; any other number is shown by its name. */
const FORECAST_MEMBERS = new Set(['l2_bound', 'l2_bound_confidence', 'max_cell_variance', 'kl_tail', 'hellinger_bound', 'hellinger_bound_confidence']);

/** A preview's utility forecast for a distribution (null for mechanisms without one). */
function forecastItems(f) {
  if (!f) return [h('dt', {}, 'Forecast'), h('dd', {}, 'none for this mechanism')];
  const lines = [];
  if (typeof f.l2_bound === 'number') lines.push(['Forecast ℓ2 error', `≤ ${num(f.l2_bound)} with probability ${num(f.l2_bound_confidence)}`]);
  if (typeof f.max_cell_variance === 'number') lines.push(['Per-cell variance', `≤ ${num(f.max_cell_variance)}`]);
  if (f.kl_tail) lines.push(['KL tail', `Pr[KL > ${num(f.kl_tail.eta)}] ≤ ${num(f.kl_tail.probability)}`]);
  if (typeof f.hellinger_bound === 'number') lines.push(['Forecast Hellinger distance', `≤ ${num(f.hellinger_bound)} with probability ${num(f.hellinger_bound_confidence)}`]);
  for (const [key, value] of Object.entries(f)) {
    if (!FORECAST_MEMBERS.has(key) && typeof value === 'number') lines.push([key.replaceAll('_', ' '), num(value)]);
  }
  return lines.map(([term, text]) => [h('dt', {}, term), h('dd', {}, text)]);
}

/** A table preview's `forecasts`, one line per row (each row is drawn on its own). */
function forecastTable(forecasts, rowNames) {
  if (forecasts.every((f) => !f)) return 'none for this mechanism';
  return h('div', { class: 'table-scroll' }, h('table', { class: 'forecasts' },
    h('thead', {}, h('tr', {}, ['Row', 'ℓ2 error', 'Per-cell variance', 'KL tail'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, forecasts.map((f, i) => h('tr', {},
      h('th', { scope: 'row' }, rowNames?.[i] ?? `row ${i}`),
      f ? [
        h('td', {}, `≤ ${num(f.l2_bound)} (p ${num(f.l2_bound_confidence)})`),
        h('td', {}, `≤ ${num(f.max_cell_variance)}`),
        h('td', {}, f.kl_tail ? `Pr[KL > ${num(f.kl_tail.eta)}] ≤ ${num(f.kl_tail.probability)}` : '—'),
      ] : h('td', { colspan: 3 }, 'none'))))));
}

// ------------------------------------------------------------------ frame

function renderFrame() {
  const me = session();
  clear(nav);
  clear(who);
  if (!me) return;
  const here = location.hash || '#/';
  const link = (href, text) => h('a', { href, 'aria-current': here === href ? 'page' : null }, text);
  nav.append(link('#/', 'Datasets'));
  if (me.role === 'admin') {
    nav.append(link('#/populations', 'Populations'), link('#/new-dataset', 'Register dataset'), link('#/new-token', 'New analyst token'));
  }
  who.append(
    h('span', { class: 'role', 'data-role': me.role }, me.role === 'admin' ? 'Admin' : `Analyst ${me.token_id}`),
    h('button', { type: 'button', class: 'secondary', onclick: signOut }, 'Sign out'));
}

function signOut() {
  clearSession();
  location.hash = '#/';
  route('You are signed out.');
}

// ------------------------------------------------------------------ sign-in

function renderSignIn(message) {
  const token = h('input', { type: 'password', autocomplete: 'off', spellcheck: 'false', required: true });
  const button = h('button', { type: 'submit' }, 'Sign in');
  const errors = h('div', { 'aria-live': 'polite' });
  const form = h('form', { class: 'card narrow', method: 'post', novalidate: true },
    h('h1', {}, 'Sign in'),
    message ? h('p', { class: 'notice' }, message) : null,
    field('Bearer token', token, 'The admin token printed at start-up, an analyst token (dra_…), or, with single sign-on, an access token from your organisation\'s OpenID provider (a JWT; sign in again when it expires). It is kept in this tab only and sent only in the Authorization header.'),
    errors, button);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clear(errors);
    const value = token.value.trim();
    if (!value) {
      errors.append(problemBox(new Problem(0, { title: 'A token is required', detail: 'Paste the admin token, an analyst token or an access token from your OpenID provider.' })));
      return;
    }
    busy(button, true);
    try {
      const me = await call('GET', '/v1/whoami', { token: value });
      saveSession({ token: value, role: me.role, token_id: me.token_id ?? null });
      token.value = '';
      if (!location.hash || location.hash === '#/') route(); else location.hash = '#/';
    } catch (error) {
      errors.append(problemBox(error));
    } finally {
      busy(button, false);
    }
  });
  clear(main).append(form);
  token.focus();
}

// ------------------------------------------------------------------ datasets

async function renderDatasets() {
  const me = session();
  const list = await call('GET', '/v1/datasets');
  const budgets = await Promise.all(list.items.map((d) => call('GET', `/v1/datasets/${d.id}/budget`)));
  const rows = list.items.map((d, i) => ({ dataset: d, budget: budgets[i] }));
  let sort = 'none';
  const body = h('tbody');
  const sortButton = h('button', { type: 'button', class: 'sort' }, 'Remaining ', h('span', { 'aria-hidden': 'true' }, '↕'));
  const remainingHeader = h('th', { scope: 'col', 'aria-sort': 'none' }, sortButton);
  const draw = () => {
    const ordered = [...rows];
    if (sort !== 'none') {
      const sign = sort === 'ascending' ? 1 : -1;
      ordered.sort((a, b) => sign * (a.budget.remaining / a.budget.total - b.budget.remaining / b.budget.total));
    }
    clear(body).append(...ordered.map(({ dataset: d, budget: b }) => h('tr', { 'data-id': d.id },
      h('th', { scope: 'row' }, h('a', { href: `#/datasets/${d.id}` }, d.name)),
      h('td', { class: 'budget-cell' }, budgetSummary(d, b)),
      h('td', { class: 'num' }, `${num(b.remaining)}`, h('span', { class: 'muted' }, ` (${percent(b.remaining, b.total)})`)),
      h('td', { class: 'num' }, String(b.releases)),
      h('td', {}, d.neighbouring.replaceAll('_', ' ')),
      h('td', {}, h('time', { datetime: d.created_at }, when(d.created_at))))));
  };
  sortButton.addEventListener('click', () => {
    sort = sort === 'ascending' ? 'descending' : 'ascending';
    remainingHeader.setAttribute('aria-sort', sort);
    sortButton.lastChild.textContent = sort === 'ascending' ? '↑' : '↓';
    sortButton.setAttribute('aria-label', `Remaining budget, sorted ${sort}; activate to reverse`);
    draw();
    announce(`Sorted by remaining budget, ${sort}.`);
  });
  draw();
  const content = rows.length
    ? h('div', { class: 'table-scroll' }, h('table', { class: 'datasets' },
      h('caption', {}, `${rows.length} dataset${rows.length === 1 ? '' : 's'}${me.role === 'admin' ? '' : ' this token may use'}`),
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col' }, 'Dataset'), h('th', { scope: 'col' }, 'Budget spent'), remainingHeader,
        h('th', { scope: 'col' }, 'Releases'), h('th', { scope: 'col' }, 'Relation'), h('th', { scope: 'col' }, 'Created'))),
      body))
    : h('p', { class: 'empty' }, me.role === 'admin' ? 'No datasets yet. ' : 'This token has no datasets.',
      me.role === 'admin' ? h('a', { href: '#/new-dataset' }, 'Register the first one') : null);
  clear(main).append(h('h1', {}, 'Datasets'), content);
}

// ------------------------------------------------------------------ one dataset

/** The cells of one pasted line: CSV-like when it has a comma, semicolon or tab, else words. */
function splitLine(line) {
  const cells = /[,;\t]/.test(line) ? line.split(/[,;\t]/).map((c) => c.trim()) : line.split(/\s+/);
  if (cells.length > 1 && cells[cells.length - 1] === '') cells.pop(); // a trailing separator
  return cells;
}

const isNumber = (cell) => cell !== '' && Number.isFinite(Number(cell));

/**
 * The counts field: one line of numbers is a vector (`counts`); several lines are a table
 * (`table`, one row per disjoint group, all over the same cells). An optional header line names
 * the cells (it only labels the chart and is never sent), and an optional first column of
 * non-numbers names a table's rows (sent as `row_names` and stored with the release).
 */
function parseCounts(text) {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  if (!lines.length) throw new Problem(0, { title: 'No counts', detail: 'Paste the counts, e.g. 120, 45, 3, 0, 17, 9, or one line per group for a table.' });
  let rows = lines.map(splitLine);
  let header = null;
  if (rows.length > 1 && rows[0].some((c) => !isNumber(c))) [header, ...rows] = rows;
  let rowNames = null;
  if (rows.every((r) => r.length > 1 && !isNumber(r[0]))) {
    rowNames = rows.map((r) => r[0]);
    rows = rows.map((r) => r.slice(1));
  }
  const values = rows.map((r, i) => r.map((cell, j) => {
    if (!isNumber(cell)) {
      const where = rows.length > 1 ? ` of row ${i + 1}${rowNames ? ` (${rowNames[i]})` : ''}` : '';
      throw new Problem(0, { title: 'Not a number', detail: `Value ${j + 1}${where} is ${cell === '' ? 'empty' : `“${cell}”`}, not a number.` });
    }
    return Number(cell);
  }));
  const width = values[0].length;
  const ragged = values.findIndex((r) => r.length !== width);
  if (ragged >= 0) {
    throw new Problem(0, { title: 'Rows of different lengths', detail: `Row 1 has ${width} values but row ${ragged + 1} has ${values[ragged].length}: every row of a table is over the same cells.` });
  }
  let labels = header;
  if (labels && rowNames && labels.length === width + 1) labels = labels.slice(1); // names the row column
  if (labels && labels.length !== width) {
    throw new Problem(0, { title: 'Header and rows differ', detail: `The header has ${labels.length} names but the rows have ${width} values.` });
  }
  return values.length === 1
    ? { counts: values[0], labels }
    : { table: values, labels, rowNames };
}

/** What the pasted counts are, in words ('' while they do not parse). */
function describeCounts(parsed) {
  if (!parsed) return '';
  if (parsed.counts) return `A distribution over ${parsed.counts.length} cells.`;
  return `A table: ${parsed.table.length} rows × ${parsed.table[0].length} cells, released for one charge${parsed.rowNames ? ', with named rows' : ''}.`;
}

/** Up to `max` names, then how many more. */
function nameList(names, max = 8) {
  return names.length <= max ? names.join(', ') : `${names.slice(0, max).join(', ')}, … (${names.length - max} more)`;
}

/**
 * Where the pasted counts disagree with the dataset's cell names ('' when they do not): a
 * different number of cells (the service refuses it), or a header line naming them otherwise
 * (the dataset's names win: they are what the service stores and returns).
 */
function namesWarning(cells, parsed) {
  if (!cells || !parsed) return '';
  const width = (parsed.counts ?? parsed.table[0]).length;
  if (width !== cells.length) {
    return `This dataset has ${cells.length} named cells (${nameList(cells)}) but ${parsed.table ? 'each row has' : 'the line has'} ${width} values: the service will refuse it.`;
  }
  if (parsed.labels && parsed.labels.some((name, i) => name.trim().normalize('NFC') !== cells[i])) {
    return `The header line differs from the dataset's cell names; the dataset's names are used: ${nameList(cells)}.`;
  }
  return '';
}

// ------------------------------------------------------------------ mechanisms, as the service lists them

// Everything the forms know about a mechanism comes from `GET /v1/mechanisms` (api.js
// `mechanisms()`): its fields, how it reads ε, whether it takes an order or a table, the plan
// targets it answers. Nothing here names a mechanism.

/** What a plan target bounds: its control's words, and whether a confidence goes with it. */
const TARGET_KINDS = {
  l2: { option: 'ℓ2 error', bound: 'ℓ2 error ≤', confidence: true },
  cell_sd: { option: 'per-cell sd', bound: 'Cell sd ≤', confidence: false },
  kl: { option: 'KL', bound: 'KL divergence ≤', confidence: true },
};
const targetKind = (kind) => TARGET_KINDS[kind] ?? { option: kind.replaceAll('_', ' '), bound: `${kind.replaceAll('_', ' ')} ≤`, confidence: false };

/** Whether, with these field values, a mechanism runs with its parameters as given (ε a cap). */
function runsGiven(mechanism, values) {
  return mechanism.epsilon === 'cap'
    || (mechanism.epsilon === 'target_or_cap' && values[mechanism.noise_field] !== undefined);
}

/** The ε control's label, from how the mechanism reads ε. */
function epsilonLabel(mechanism) {
  switch (mechanism.epsilon) {
    case 'target': return 'ε (privacy cost to calibrate to)';
    case 'target_or_cap': return `ε (privacy cost to calibrate to; a cap when ${mechanism.noise_field} is given)`;
    case 'cap': return 'ε cap (optional: its fields fix the cost)';
    case 'pure': return 'ε (pure ε-DP, required)';
    default: return 'ε';
  }
}

/** A field's default as its placeholder says it. */
function defaultText(value) {
  return Array.isArray(value) ? value.map((v) => num(v)).join(', ') : num(value);
}

/**
 * The control of one of a mechanism's fields, as the listing describes it: a number, or (for
 * `number_or_numbers`) a text of one number or several separated by commas; its default as the
 * placeholder, its description as the hint. `value()` reads it (undefined when empty) and
 * throws a Problem naming the field (never quoting what was typed) when it is not numbers.
 */
function mechanismField(spec, kept) {
  const many = spec.type !== 'number';
  const placeholder = spec.default !== undefined && spec.default !== null ? `default ${defaultText(spec.default)}` : (spec.required ? 'required' : 'optional');
  const control = many
    ? h('input', { type: 'text', inputmode: 'decimal', autocomplete: 'off', spellcheck: 'false', placeholder })
    : numberInput({ placeholder });
  control.required = spec.required;
  control.dataset.field = spec.name;
  if (kept !== undefined) control.value = kept;
  const hint = many ? `${spec.description} A number, or several separated by commas.` : spec.description;
  const element = field(spec.required ? `${spec.name} (required)` : spec.name, control, hint);
  element.classList.add('mechanism-field');
  return {
    name: spec.name,
    control,
    element,
    value() {
      const text = control.value.trim();
      if (text === '') return undefined;
      const parts = many ? text.split(/[\s,;]+/).filter(Boolean) : [text];
      const values = parts.map(Number);
      const bad = values.findIndex((v) => !Number.isFinite(v));
      if (bad >= 0) {
        throw new Problem(0, { title: 'Not a number', detail: `${spec.name}: value ${bad + 1} is not a number.`, field: spec.name });
      }
      return many && values.length > 1 ? values : values[0];
    },
  };
}

/**
 * A mechanism's fields as controls in `slot`, rebuilt when the mechanism changes; what was typed
 * in a field is kept per mechanism, so switching back restores it. For a plan (`planning`), only
 * the fields the listing says a plan item takes.
 */
function mechanismFields(slot, planning = false) {
  const typed = new Map();
  let shown = [];
  let owner = null;
  return {
    show(mechanism) {
      for (const f of shown) typed.set(`${owner}.${f.name}`, f.control.value);
      owner = mechanism?.name ?? null;
      shown = (mechanism?.fields ?? [])
        .filter((spec) => !planning || spec.plan)
        .map((spec) => mechanismField(spec, typed.get(`${owner}.${spec.name}`)));
      clear(slot).append(...shown.map((f) => f.element));
      slot.hidden = !shown.length;
      return shown;
    },
    /** The fields given, by name (a Problem when one is not numbers). */
    values() {
      const values = {};
      for (const f of shown) {
        const value = f.value();
        if (value !== undefined) values[f.name] = value;
      }
      return values;
    },
    control(name) {
      return shown.find((f) => f.name === name)?.control ?? null;
    },
    controls() {
      return shown.map((f) => f.control);
    },
  };
}

/** A mechanism's summary, in the service's words, folded away under its name. */
function mechanismAbout(mechanism) {
  return h('details', { class: 'mechanism-about' },
    h('summary', {}, `About ${mechanism.name}`),
    h('p', {}, mechanism.summary));
}

/** The options of a mechanism select: every listed mechanism (`markDefault`: the default marked). */
function mechanismOptions(listing, markDefault = false) {
  return listing.map((m) => h('option', { value: m.name }, markDefault && m.default ? `${m.name} (default)` : m.name));
}

function releaseForm(dataset, listing, onReleased) {
  const byName = new Map(listing.map((m) => [m.name, m]));
  const counts = h('textarea', { rows: 4, spellcheck: 'false', autocomplete: 'off' });
  const shape = h('p', { class: 'hint shape', 'aria-live': 'polite' });
  const warning = h('p', { class: 'hint warning names-warning', 'aria-live': 'polite' });
  const label = h('input', { type: 'text', maxlength: 200, autocomplete: 'off', spellcheck: 'false' });
  // A dataset split into blocks: every release names the blocks it reads (by the time of the
  // records' events, never today's date by default).
  const period = dataset.blocks?.period ?? null;
  const blockFrom = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: period ? BLOCK_EXAMPLE[period] : '' });
  const blockTo = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'same as from' });
  const mechanism = h('select', {}, mechanismOptions(listing, true));
  mechanism.value = (listing.find((m) => m.default) ?? listing[0]).name;
  const epsilon = numberInput({ min: 0 });
  const epsilonField = field('ε', epsilon);
  const order = numberInput({ min: 1, placeholder: `λ = ${num(dataset.budget.order)}` });
  const orderField = field('Calibration order (optional)', order, `The Rényi order to calibrate at (the dataset's order λ = ${num(dataset.budget.order)} when empty). The cost is charged at the dataset's order either way.`);
  const fieldsSlot = h('div', { class: 'field-row mechanism-fields' });
  const fields = mechanismFields(fieldsSlot);
  const about = h('div', { class: 'mechanism-about-slot' });
  const previewButton = h('button', { type: 'submit' }, 'Preview');
  const releaseButton = h('button', { type: 'button', class: 'release', disabled: true }, 'Release');
  const result = h('div', { class: 'preview-result', 'aria-live': 'polite' });
  let previewed = null; // { body, key, names } of the last successful preview
  let parsed = null; // the counts as they parse now (null while they do not)

  const selected = () => byName.get(mechanism.value);
  const invalidate = () => {
    if (previewed) {
      previewed = null;
      releaseButton.disabled = true;
      releaseButton.textContent = 'Release';
      clear(result).append(h('p', { class: 'muted' }, 'The request changed; preview it again before releasing.'));
    }
  };
  /** What the pasted counts are, and whether the mechanism takes them. */
  const describe = () => {
    const m = selected();
    shape.textContent = describeCounts(parsed);
    if (parsed?.table && !m.tables) shape.textContent += ` ${m.name} releases one vector, not a table.`;
    warning.textContent = namesWarning(dataset.cells, parsed);
  };
  const syncMechanism = () => {
    const m = selected();
    epsilonField.querySelector('label').textContent = epsilonLabel(m);
    epsilon.required = m.epsilon === 'target' || m.epsilon === 'pure';
    orderField.hidden = !m.order;
    for (const f of fields.show(m)) f.control.addEventListener('input', invalidate);
    clear(about).append(mechanismAbout(m));
    describe();
  };
  mechanism.addEventListener('change', () => { syncMechanism(); invalidate(); });
  for (const control of [counts, epsilon, order, label, blockFrom, blockTo]) control.addEventListener('input', invalidate);
  counts.addEventListener('input', () => {
    try {
      parsed = parseCounts(counts.value);
    } catch {
      parsed = null;
    }
    describe();
  });
  syncMechanism();

  const requestBody = () => {
    const m = selected();
    const counted = parseCounts(counts.value);
    if (counted.table && !m.tables) {
      throw new Problem(0, { title: 'One vector only', detail: `${m.name} releases one vector: paste one line of counts, or choose a mechanism that releases tables.` });
    }
    const values = fields.values();
    const eps = epsilon.value.trim() === '' ? undefined : Number(epsilon.value);
    if (!runsGiven(m, values) && !(eps > 0)) {
      throw new Problem(0, { title: 'ε is required', detail: `Give the privacy cost ε ${m.epsilon === 'pure' ? 'of the selection' : 'to calibrate to'} (a number above 0).` });
    }
    const body = counted.table
      ? { table: counted.table, mechanism: m.name }
      : { counts: counted.counts, mechanism: m.name };
    if (eps !== undefined) body.epsilon = eps;
    if (m.order && order.value.trim() !== '') body.order = Number(order.value);
    Object.assign(body, values);
    // Row names are public names the user typed next to the rows: the service stores them.
    if (counted.table && counted.rowNames) body.row_names = counted.rowNames;
    if (label.value.trim()) body.label = label.value.trim();
    if (period) {
      const from = blockFrom.value.trim();
      const to = blockTo.value.trim();
      if (from === '') {
        throw new Problem(0, { title: 'Blocks are required', detail: `This dataset is split by ${period}: give the first block the release reads (e.g. ${BLOCK_EXAMPLE[period]}), and the last if it reads more than one.` });
      }
      if (to === '' || to === from) body.block = from;
      else body.blocks = { from, to };
    }
    return { body, names: { cells: counted.labels, rows: counted.rowNames ?? null } };
  };

  /** Marks the control of the field a problem names (the service's `field`), and focuses it. */
  const markField = (error) => {
    for (const control of [epsilon, order, ...fields.controls()]) control.removeAttribute('aria-invalid');
    const name = error?.body?.field;
    const control = name === 'epsilon' ? epsilon : name === 'order' ? order
      : (name === 'block' || name === 'blocks' || name === 'blocks.from') ? blockFrom
        : name === 'blocks.to' ? blockTo : fields.control(name);
    if (control) {
      control.setAttribute('aria-invalid', 'true');
      control.focus();
    }
  };

  const cellsHint = dataset.cells
    ? ` This dataset names its ${dataset.cells.length} cells: give ${dataset.cells.length} values per line, in the order of its cell names (a header line is checked against them; the dataset's names win).`
    : ' An optional CSV header line names the cells for the chart (it is not sent).';
  const form = h('form', { class: 'release-form', method: 'post', novalidate: true },
    field('Counts', counts, `One line of numbers (separated by commas or spaces) for a distribution, or one line per disjoint group of records for a table, all over the same cells.${cellsHint} An optional first column names a table's rows: those names are sent and stored with the release, so use public names only. The counts are sent to the service and never stored.`),
    shape,
    warning,
    h('div', { class: 'field-row' },
      field('Mechanism', mechanism),
      epsilonField,
      orderField),
    about,
    fieldsSlot,
    field('Label (optional)', label, 'Free text, up to 200 characters, to find this release again: it is stored with the release and shown in the list below.'),
    period ? h('div', { class: 'field-row' },
      field(`First block read (${period})`, blockFrom, `The ${period} of the earliest records the counts cover, by the time of their events, e.g. ${BLOCK_EXAMPLE[period]}. The release is charged its full cost on every block it reads.`),
      field('Last block read (optional)', blockTo, 'Empty when the counts cover one block.')) : null,
    h('div', { class: 'actions' }, previewButton, releaseButton),
    result);

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clear(result);
    previewed = null;
    releaseButton.disabled = true;
    markField(null);
    let request;
    try {
      request = requestBody();
    } catch (error) {
      result.append(problemBox(error));
      markField(error);
      return;
    }
    busy(previewButton, true);
    try {
      const p = await call('POST', `/v1/datasets/${dataset.id}/releases/preview`, { body: request.body });
      // One key per previewed request: a retry of this release (a lost answer, a double click)
      // replays the stored release instead of drawing and charging again.
      previewed = { ...request, key: crypto.randomUUID() };
      const after = p.budget_after;
      const fits = p.admissible;
      // `admissible` needs both; the figures are on the ledger grid, so comparing them is exact.
      // Not admissible, the `_after` figures are today's (nothing would be charged).
      const datasetFits = fits || p.cost.epsilon <= after.remaining;
      const allocation = isLedger(p.allocation_after) ? p.allocation_after : null;
      const allocationFits = fits || !allocation || p.cost.epsilon <= allocation.remaining;
      const verdict = (ok, yes, no, extra) => h('dd', { class: ['fits', ok ? 'yes' : 'no', extra] },
        h('span', { 'aria-hidden': 'true' }, ok ? '✓ ' : '✗ '), ok ? yes : no);
      result.append(h('dl', { class: 'preview', 'data-admissible': String(fits) },
        h('dt', {}, 'Input'), h('dd', {}, request.body.table
          ? `a table of ${request.body.table.length} rows over ${request.body.table[0].length} cells, one charge for all rows`
          : `a distribution over ${request.body.counts.length} cells`),
        Array.isArray(p.cells) ? [h('dt', {}, 'Cells'), h('dd', { class: 'preview-cells' }, `the dataset's: ${nameList(p.cells)}`)] : null,
        h('dt', {}, 'Cost'), h('dd', { class: 'cost' }, `ε ${num(p.cost.epsilon)} at order λ = ${num(p.cost.order)}`),
        h('dt', {}, 'Fits the budget'),
        verdict(datasetFits,
          fits ? `Yes — ${num(after.remaining)} of ${num(after.total)} would remain` : `Yes — ${num(after.remaining)} of ${num(after.total)} remains`,
          `No — only ${num(after.remaining)} remains; the service would refuse it`),
        allocation ? [
          h('dt', {}, 'Fits your allocation'),
          verdict(allocationFits,
            fits ? `Yes — ${num(allocation.remaining)} of your ${num(allocation.epsilon)} would remain after it` : `Yes — ${num(allocation.remaining)} of your ${num(allocation.epsilon)} remains`,
            `No — only ${num(allocation.remaining)} of your allocation of ${num(allocation.epsilon)} remains; the service would refuse it`,
            'allocation-after'),
        ] : null,
        h('dt', {}, 'Mechanism'), h('dd', {}, `${p.mechanism.kind}: ${mechanismParameters(p.mechanism)}`),
        Array.isArray(p.forecasts)
          ? [h('dt', {}, 'Forecast per row'), h('dd', {}, forecastTable(p.forecasts, request.names.rows))]
          : forecastItems(p.forecast)));
      releaseButton.disabled = !fits;
      releaseButton.textContent = fits ? `Release (spends ε ${num(p.cost.epsilon)})` : 'Release (does not fit)';
      const why = !datasetFits ? 'the budget' : !allocationFits ? 'your allocation' : 'the budget';
      announce(fits ? 'Preview ready; the release fits.' : `Preview ready; the release does not fit ${why}.`);
    } catch (error) {
      result.append(problemBox(error));
      markField(error);
    } finally {
      busy(previewButton, false);
    }
  });

  releaseButton.addEventListener('click', async () => {
    if (!previewed) return;
    const { body, key, names } = previewed;
    busy(releaseButton, true);
    busy(previewButton, true);
    const outcome = h('div', { class: 'release-outcome' });
    try {
      const release = await call('POST', `/v1/datasets/${dataset.id}/releases`, { body, idempotencyKey: key });
      previewed = null;
      clear(result).append(outcome);
      outcome.append(h('p', { class: 'success', role: 'status' }, h('span', { 'aria-hidden': 'true' }, '✓ '),
        `Released #${release.seq}: charged ε ${num(release.cost.epsilon)}; ${num(release.budget.remaining)} remains.`));
      releaseButton.textContent = 'Release';
      await onReleased(release, names);
    } catch (error) {
      // A refusal charged nothing; only a lost answer (status 0) is worth retrying with this key.
      if (!(error instanceof Problem) || error.status !== 0) previewed = null;
      clear(result).append(problemBox(error));
      releaseButton.disabled = !previewed;
      if (previewed) releaseButton.textContent = 'Retry release (same Idempotency-Key)';
      else releaseButton.textContent = 'Release';
      await onReleased(null, null).catch(() => {});
    } finally {
      releaseButton.setAttribute('aria-busy', 'false');
      busy(previewButton, false);
      if (!previewed) releaseButton.disabled = true;
    }
  });
  return form;
}

// ------------------------------------------------------------------ allocations

/** Analyst tokens that may use the dataset and can be given an allocation now. */
function assignableTokens(tokens, datasetId) {
  const now = Date.now();
  return tokens.filter((t) => t.role === 'analyst' && !t.revoked_at
    && !(t.expires_at && Date.parse(t.expires_at) <= now)
    && Array.isArray(t.datasets) && t.datasets.includes(datasetId));
}

/** The ledger's grid: every charge and allocation is a multiple of 2⁻⁴⁰ (src/ledger/charge.rs). */
const LEDGER_QUANTUM = 2 ** -40;

/**
 * An allocation as someone would have typed it: the service keeps 0.3 as the grid point below
 * it (0.29999999999927…), so the shortest decimal that the service rounds down to the same point
 * (saving it unchanged changes nothing); the exact value when no shorter one does.
 */
function typedEpsilon(epsilon) {
  for (let digits = 1; digits < 17; digits += 1) {
    const typed = Number(epsilon.toPrecision(digits));
    if (typed >= epsilon && typed - epsilon < LEDGER_QUANTUM) return typed;
  }
  return epsilon;
}

/** An allocation change's ε, or that there was none. */
const changeValue = (epsilon) => (epsilon === null || epsilon === undefined ? 'none' : num(epsilon));

/** The audit trail of allocations (the service gives it oldest first), newest first. */
function changesTable(changes) {
  const newest = [...changes].reverse();
  return h('div', { class: 'table-scroll' }, h('table', { class: 'allocation-changes' },
    h('caption', {}, `Changes, newest first (${changes.length})`),
    h('thead', {}, h('tr', {}, ['When', 'Token', 'Old ε', 'New ε', 'Changed by'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, newest.map((c) => h('tr', {},
      h('td', { class: 'when' }, h('time', { datetime: c.changed_at }, when(c.changed_at))),
      h('td', {}, h('code', {}, c.token_id)),
      h('td', { class: 'num' }, changeValue(c.old_epsilon)),
      h('td', { class: 'num' }, changeValue(c.new_epsilon)),
      h('td', {}, c.changed_by))))));
}

/**
 * The dataset page's "Allocations" section. The admin sees every analyst token's allocation on
 * the dataset with spent and remaining, sets one for any analyst token that may use the dataset,
 * edits and removes them, and reads the audit trail; an analyst sees their own (or that they
 * have none) and its changes. `reload()` fetches and redraws (spent moves with releases).
 */
function allocationsPanel(dataset) {
  const me = session();
  const admin = me.role === 'admin';
  const order = num(dataset.budget.order);
  const messages = h('div', { class: 'allocation-messages', 'aria-live': 'polite' });
  const listSlot = h('div', { class: 'allocations-list' });
  const historySlot = h('div', { class: 'allocations-history' });
  const base = `/v1/datasets/${encodeURIComponent(dataset.id)}/allocations`;
  let form = null;
  let noTokens = null;
  let tokenSelect = null;
  let epsilonInput = null;
  let reload = null;

  const show = (node, focus = false) => {
    clear(messages).append(node);
    if (focus) node.focus();
  };
  // After a change the service accepted: redraw, and say so if the redraw itself fails (the
  // change stands either way).
  const refresh = async () => {
    try {
      await reload();
    } catch (error) {
      messages.append(problemBox(error));
    }
  };

  if (admin) {
    tokenSelect = h('select', { required: true });
    epsilonInput = numberInput({ min: 0, required: true });
    const save = h('button', { type: 'submit' }, 'Save allocation');
    form = h('form', { class: 'allocation-form', method: 'post', novalidate: true },
      h('h3', {}, 'Set or change an allocation'),
      h('div', { class: 'field-row' },
        field('Analyst token', tokenSelect, 'Analyst tokens whose scope includes this dataset (not revoked or expired).'),
        field(`Allocation ε (at λ = ${order})`, epsilonInput, "RDP at the dataset's order; 0 blocks the token's releases here.")),
      h('div', { class: 'actions' }, save));
    noTokens = h('p', { class: 'empty', hidden: true }, 'No analyst token may use this dataset yet: ',
      h('a', { href: '#/new-token' }, 'create one'), ' to give it an allocation.');
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      clear(messages);
      const tokenId = tokenSelect.value;
      if (!tokenId) {
        show(problemBox(new Problem(0, { title: 'Choose a token', detail: 'Pick the analyst token to give an allocation to.' })));
        return;
      }
      if (epsilonInput.value.trim() === '') {
        show(problemBox(new Problem(0, { title: 'ε is required', detail: "Give the allocation as ε at the dataset's order (0 or more)." })));
        return;
      }
      busy(save, true);
      try {
        const set = await call('PUT', `${base}/${encodeURIComponent(tokenId)}`, { body: { epsilon: Number(epsilonInput.value) } });
        epsilonInput.value = '';
        tokenSelect.value = '';
        // The table first, then the message: what the message says is on screen when it shows.
        await refresh();
        show(successBox(`Allocation of ${set.token_id} set to ε ${num(set.epsilon)}: ${num(set.spent)} spent, ${num(set.remaining)} left.`));
        announce(`Allocation of ${set.token_id} saved.`);
      } catch (error) {
        show(problemBox(error));
      } finally {
        busy(save, false);
      }
    });
  }

  const edit = (a) => {
    tokenSelect.value = a.token_id;
    epsilonInput.value = String(typedEpsilon(a.epsilon));
    clear(messages);
    epsilonInput.focus();
    epsilonInput.select();
    announce(`Editing the allocation of ${a.token_id}: change ε and save.`);
  };

  const remove = async (a, button) => {
    clear(messages);
    busy(button, true);
    try {
      await call('DELETE', `${base}/${encodeURIComponent(a.token_id)}`);
      await refresh();
      // The button went away with the redraw: the message takes the focus.
      show(successBox(`Removed the allocation of ${a.token_id}: its releases draw on the dataset's budget again (what it spent stays spent).`), true);
    } catch (error) {
      // Someone else may have changed it meanwhile (404): show the problem and what holds now.
      show(problemBox(error));
      await refresh();
    } finally {
      busy(button, false);
    }
  };

  const adminList = (allocations, assignable) => {
    const usable = new Set(assignable.map((t) => t.id));
    const rows = allocations.map((a) => h('tr', { 'data-token': a.token_id },
      h('th', { scope: 'row' }, h('code', {}, a.token_id), usable.has(a.token_id) ? null : h('span', { class: 'tag' }, 'revoked or expired')),
      h('td', { class: 'num' }, num(a.epsilon)),
      h('td', { class: 'num' }, num(a.spent)),
      h('td', { class: 'num' }, num(a.remaining)),
      h('td', { class: 'budget-cell used' }, budgetBar(a.spent, a.epsilon, `Allocation of ${a.token_id}`)),
      h('td', { class: 'row-actions' },
        usable.has(a.token_id) ? h('button', {
          type: 'button', class: 'secondary small', 'aria-label': `Edit the allocation of ${a.token_id}`, onclick: () => edit(a),
        }, 'Edit') : null,
        h('button', {
          type: 'button', class: 'secondary small danger', 'aria-label': `Remove the allocation of ${a.token_id}`,
          onclick: (event) => remove(a, event.currentTarget),
        }, 'Remove'))));
    return rows.length
      ? h('div', { class: 'table-scroll' }, h('table', { class: 'allocations' },
        h('caption', {}, `${rows.length} allocation${rows.length === 1 ? '' : 's'} at λ = ${order}`),
        h('thead', {}, h('tr', {}, ['Token', 'Allocation (ε)', 'Spent', 'Remaining', 'Used', 'Actions'].map((c) => h('th', { scope: 'col', class: c === 'Used' ? 'used' : null }, c)))),
        h('tbody', {}, rows)))
      : h('p', { class: 'empty' }, "No allocations: every analyst token draws on the dataset's budget.");
  };

  const fillTokens = (allocations, assignable) => {
    const kept = tokenSelect.value;
    const byToken = new Map(allocations.map((a) => [a.token_id, a]));
    clear(tokenSelect).append(
      h('option', { value: '' }, assignable.length ? 'Choose a token…' : 'No analyst token may use this dataset'),
      ...assignable.map((t) => {
        const a = byToken.get(t.id);
        return h('option', { value: t.id }, `${t.id} — ${a ? `allocation ε ${num(a.epsilon)}` : 'no allocation'} (created ${when(t.created_at)})`);
      }));
    tokenSelect.value = assignable.some((t) => t.id === kept) ? kept : '';
  };

  const ownView = (allocation) => (allocation
    ? h('div', { class: 'budget-line allocation-own', 'data-token': allocation.token_id },
      budgetBar(allocation.spent, allocation.epsilon, 'Your allocation'),
      h('p', { class: 'budget-text' },
        h('strong', {}, `Your allocation: ε ${num(allocation.epsilon)}`), ` at λ = ${order}, ${num(allocation.spent)} spent, ${num(allocation.remaining)} left. `,
        h('span', { class: 'muted' }, "A release must fit both your allocation and the dataset's remaining budget.")))
    : h('p', { class: 'allocation-own allocation-none' },
      "You have no allocation on this dataset: your releases draw on the dataset's budget, shared with everyone who may use it."));

  reload = async () => {
    const [list, tokens] = await Promise.all([
      call('GET', base),
      admin ? call('GET', '/v1/tokens') : null,
    ]);
    const allocations = Array.isArray(list.allocations) ? list.allocations : [];
    const changes = Array.isArray(list.changes) ? list.changes : [];
    if (admin) {
      const assignable = assignableTokens(tokens.items || [], dataset.id);
      clear(listSlot).append(adminList(allocations, assignable));
      fillTokens(allocations, assignable);
      form.hidden = !assignable.length;
      noTokens.hidden = !!assignable.length;
    } else {
      clear(listSlot).append(ownView(allocations.find((a) => a.token_id === me.token_id) ?? null));
    }
    clear(historySlot);
    if (changes.length) historySlot.append(h('h3', {}, admin ? 'History' : 'Changes to your allocation'), changesTable(changes));
  };

  const intro = admin
    ? h('p', { class: 'hint' }, `An allocation caps what one analyst token may spend on this dataset (ε at λ = ${order}). A release by that token must fit both its allocation and the dataset's budget; tokens without one draw on the dataset's budget. Allocations may add up to more than the budget (the budget still binds), and lowering one below what the token spent blocks it without losing anything.`)
    : null;
  const element = section('Allocations', intro, listSlot, messages, form, noTokens, historySlot);
  element.classList.add('allocations-section');
  return { element, reload };
}

// ------------------------------------------------------------------ planning

/** A number input's value, or undefined when empty (JSON.stringify then leaves the key out). */
const numberOf = (input) => (input.value.trim() === '' ? undefined : Number(input.value));

/**
 * What an item can be planned by with this mechanism (null: "auto"): ε, each target the
 * mechanism answers (for "auto", any mechanism it weighs), and, for a mechanism whose fields can
 * fix it, those fields alone (no ε, no target: its cost and forecast).
 */
function planGoals(listing, mechanism) {
  const weighed = mechanism ? [mechanism] : listing.filter((m) => m.auto);
  const targets = [...new Set(weighed.flatMap((m) => m.targets))];
  const goals = [['epsilon', 'ε'], ...targets.map((t) => [t, targetKind(t).option])];
  if (mechanism && (mechanism.epsilon === 'cap' || mechanism.epsilon === 'target_or_cap')) {
    goals.push(['given', mechanism.epsilon === 'cap' ? 'its fields' : `given ${mechanism.noise_field}`]);
  }
  return goals;
}

/** One planned release in the form: its controls, its request item, and its invalid mark. */
function planItem(dataset, listing, onRemove) {
  const byName = new Map(listing.map((m) => [m.name, m]));
  const d = numberInput({ min: 2, step: 1, value: dataset.cells ? String(dataset.cells.length) : '' });
  const n = numberInput({ min: 0 });
  const lower = h('input', { type: 'checkbox', id: id('lower') });
  const rows = numberInput({ min: 1, step: 1, placeholder: 'optional' });
  const mechanism = h('select', {}, h('option', { value: 'auto' }, 'auto'), mechanismOptions(listing));
  const fieldsSlot = h('div', { class: 'field-row mechanism-fields' });
  const fields = mechanismFields(fieldsSlot, true);
  const goal = h('select', {});
  const value = numberInput({ min: 0 });
  const valueField = field('ε', value);
  const confidence = numberInput({ min: 0.5, max: 0.999999, value: '0.95' });
  const confidenceField = field('Confidence', confidence);
  const legend = h('legend');
  const remove = h('button', { type: 'button', class: 'secondary small danger' }, 'Remove');
  const element = h('fieldset', { class: 'plan-item' }, legend,
    h('div', { class: 'field-row' },
      field('d (cells)', d), field('n (public total)', n), field('Rows (a table)', rows),
      field('Mechanism', mechanism), field('Plan by', goal), valueField, confidenceField),
    fieldsSlot,
    h('div', { class: 'actions' }, h('div', { class: 'check' }, lower, h('label', { for: lower.id }, 'n is a public lower bound of the total')), remove));
  const syncGoal = () => {
    const kind = goal.value;
    valueField.hidden = kind === 'given';
    valueField.querySelector('label').textContent = kind === 'epsilon' ? `ε (at λ = ${num(dataset.budget.order)})` : targetKind(kind).bound;
    confidenceField.hidden = kind === 'epsilon' || kind === 'given' || !targetKind(kind).confidence;
  };
  const syncMechanism = () => {
    const m = byName.get(mechanism.value) ?? null;
    // "auto" weighs every mechanism with its own defaults: no fields of one mechanism here.
    fields.show(m);
    const kept = goal.value;
    const goals = planGoals(listing, m);
    clear(goal).append(...goals.map(([k, text]) => h('option', { value: k }, text)));
    goal.value = goals.some(([k]) => k === kept) ? kept : 'epsilon';
    syncGoal();
  };
  mechanism.addEventListener('change', syncMechanism);
  goal.addEventListener('change', syncGoal);
  remove.addEventListener('click', () => onRemove(item));
  syncMechanism();
  const controls = {
    d, n, n_lower_bound: n, rows, mechanism, epsilon: value, target: value,
    'target.confidence': confidence,
  };
  const item = {
    element,
    number(i, count) {
      legend.textContent = `Item ${i + 1}`;
      remove.setAttribute('aria-label', `Remove item ${i + 1}`);
      remove.disabled = count === 1;
    },
    /** The request's item (a Problem naming the field when a mechanism field is not numbers). */
    body() {
      const body = { d: numberOf(d), rows: numberOf(rows), mechanism: mechanism.value };
      body[lower.checked ? 'n_lower_bound' : 'n'] = numberOf(n);
      Object.assign(body, fields.values());
      if (goal.value === 'epsilon') body.epsilon = numberOf(value);
      else if (goal.value !== 'given') {
        body.target = { [goal.value]: numberOf(value) };
        if (targetKind(goal.value).confidence) body.target.confidence = numberOf(confidence);
      }
      return body;
    },
    /** Marks the control of `field` (an item's field, e.g. `target.l2`) invalid; null clears. */
    mark(fieldName) {
      for (const control of element.querySelectorAll('[aria-invalid]')) control.removeAttribute('aria-invalid');
      if (!fieldName) return null;
      const control = controls[fieldName] ?? (fieldName.startsWith('target.') ? value : null)
        ?? fields.control(fieldName) ?? controls[fieldName.split('.')[0]];
      if (control) control.setAttribute('aria-invalid', 'true');
      return control;
    },
  };
  return item;
}

/** A plan forecast in one line: ℓ2 at its confidence, the per-cell sd, and KL when bounded. */
const forecastText = (f) => (f
  ? `ℓ2 ≤ ${num(f.l2)} (p ${num(f.confidence)}), cell sd ≤ ${num(f.cell_sd)}${typeof f.kl === 'number' ? `, KL ≤ ${num(f.kl)}` : ''}`
  : '—');

/** Why an item is out of reach and what would reach it (or why no mechanism applies). */
function unreachableText(item) {
  const s = item.shortfall;
  const reasons = item.candidates.filter((c) => c.reason).map((c) => `${c.mechanism}: ${c.reason}`);
  return h('span', { class: 'unreachable' }, h('strong', {}, '✗ Unreachable. '),
    s ? [`Even at ε ${num(s.max_epsilon)}, ${item.mechanism ?? 'the closest mechanism'} reaches only ${forecastText(s.best)}; `,
      s.min_n != null ? `a public total of ${num(s.min_n)} or more would reach the target.` : 'no public total up to 2⁵³ would reach it.']
      : `No mechanism applies${reasons.length ? ` (${reasons.join('; ')})` : ''}.`);
}

/** A plan's answer: one row per item, then the totals against what the caller may spend. */
function planAnswer(answer, sent) {
  const rows = answer.items.map((it, i) => {
    const s = sent[i];
    const planned = it.status === 'planned';
    return h('tr', { 'data-item': i, 'data-status': it.status },
      h('th', { scope: 'row' }, String(i + 1)),
      h('td', {}, `${s.rows ? `${s.rows} rows × ` : ''}${s.d} cells, n ${s.n_lower_bound !== undefined ? '≥' : '='} ${num(s.n ?? s.n_lower_bound)}`),
      h('td', { class: 'mechanism' }, it.mechanism ?? '—', planned ? null : h('span', { class: 'muted' }, ' (closest)')),
      // A planned item without ε runs with the fields it gave (they fix its cost): none to ask for.
      h('td', { class: 'num epsilon', 'data-value': it.epsilon }, planned ? (typeof it.epsilon === 'number' ? num(it.epsilon) : 'none') : '—'),
      h('td', { class: 'num cost', 'data-value': it.cost }, planned ? num(it.cost) : '—'),
      h('td', { class: 'params' }, planned ? mechanismParameters(it.parameters) : ''),
      h('td', { class: 'forecast' }, planned ? forecastText(it.forecast) : unreachableText(it)));
  });
  const fits = answer.fits === true;
  const why = answer.unreachable ? `${answer.unreachable} item${answer.unreachable === 1 ? ' is' : 's are'} unreachable`
    : `the total exceeds the ${num(answer.remaining)} that remains`;
  const analyst = session()?.role === 'analyst';
  return h('div', { class: 'plan-answer' },
    h('div', { class: 'table-scroll' }, h('table', { class: 'plan-results' },
      h('caption', {}, `The plan at λ = ${num(answer.order)}: nothing was charged`),
      h('thead', {}, h('tr', {}, ['#', 'Item', 'Mechanism', 'ε to ask for', 'Cost', 'Parameters', 'Forecast (worst case)'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows))),
    h('dl', { class: 'plan-totals', 'data-fits': String(fits) },
      h('dt', {}, 'Total cost'), h('dd', { class: 'total-cost', 'data-value': answer.total_cost }, `ε ${num(answer.total_cost)} at order λ = ${num(answer.order)}`),
      h('dt', {}, 'You may still spend'), h('dd', { class: 'remaining', 'data-value': answer.remaining }, num(answer.remaining),
        h('span', { class: 'muted' }, analyst ? " (the dataset's remaining budget, or less under your allocation)" : " (the dataset's remaining budget)")),
      h('dt', {}, 'Fits'), h('dd', { class: ['fits', fits ? 'yes' : 'no'] }, h('span', { 'aria-hidden': 'true' }, fits ? '✓ ' : '✗ '),
        fits ? `Yes — ${num(answer.remaining - answer.total_cost)} would remain after these releases` : `No — ${why}`),
      h('dt', {}, 'Share of what remains'), h('dd', {}, budgetBar(answer.total_cost, answer.remaining, 'The plan against what you may still spend'))));
}

/**
 * The dataset page's "Plan" section: planned releases (shape, a public total, a mechanism or
 * auto, ε or an accuracy target) sent to POST /plan; the answer per item and for the list.
 */
function planPanel(dataset, listing) {
  const list = h('div', { class: 'plan-items' });
  const result = h('div', { class: 'plan-result', 'aria-live': 'polite' });
  const items = [];
  const renumber = () => items.forEach((it, i) => it.number(i, items.length));
  const add = () => {
    const item = planItem(dataset, listing, (gone) => {
      items.splice(items.indexOf(gone), 1);
      gone.element.remove();
      renumber();
      items[0].element.querySelector('input').focus();
    });
    items.push(item);
    list.append(item.element);
    renumber();
    return item;
  };
  add();
  const addButton = h('button', { type: 'button', class: 'secondary' }, 'Add an item');
  addButton.addEventListener('click', () => add().element.querySelector('input').focus());
  const planButton = h('button', { type: 'submit' }, 'Plan');
  const form = h('form', { class: 'plan-form', method: 'post', novalidate: true },
    h('p', { class: 'hint' }, 'Which mechanism and which ε reach the accuracy you need, and what the list would cost, before spending anything. ',
      h('strong', {}, 'n must be a public figure'), ' (a design total, a published figure, or a public floor with “lower bound”), never read off the private counts: choosing ε from them would itself leak. No counts are sent and planning charges nothing.'),
    list, h('div', { class: 'actions' }, addButton, planButton), result);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clear(result);
    for (const it of items) it.mark(null);
    const sent = [];
    for (const it of items) {
      try {
        sent.push(it.body());
      } catch (error) {
        // A mechanism field that is not numbers: said, and marked, before anything is sent.
        result.append(problemBox(error));
        it.mark(error.body?.field)?.focus();
        return;
      }
    }
    busy(planButton, true);
    try {
      const answer = await call('POST', `/v1/datasets/${encodeURIComponent(dataset.id)}/plan`, { body: { items: sent } });
      result.append(planAnswer(answer, sent));
      announce(`Planned: total cost ε ${num(answer.total_cost)}; ${answer.fits ? 'it fits' : 'it does not fit'}. Nothing was charged.`);
    } catch (error) {
      result.append(problemBox(error));
      // items[2].target.l2: mark the control at fault in the item it names.
      const at = /^items\[(\d+)\]\.(.+)$/.exec(error?.body?.field ?? '');
      if (at && items[Number(at[1])]) items[Number(at[1])].mark(at[2])?.focus();
    } finally {
      busy(planButton, false);
    }
  });
  const element = section('Plan', form);
  element.classList.add('plan-section');
  // After a release the plan's "remaining" and "fits" are out of date: say so instead.
  const stale = () => {
    if (result.querySelector('.plan-answer')) clear(result).append(h('p', { class: 'muted' }, 'A release spent budget since this plan; plan again to see what remains.'));
  };
  return { element, stale };
}

/** A dataset's cell names, in order (the first 60; every chart's numbers list them all). */
function cellNames(cells) {
  const shown = cells.slice(0, 60);
  const headingId = id('cells');
  return h('div', { class: 'cell-names' },
    h('span', { class: 'cell-names-title', id: headingId }, `${cells.length} named cells:`),
    h('ol', { 'aria-labelledby': headingId }, shown.map((name) => h('li', {}, name))),
    cells.length > shown.length ? h('span', { class: 'muted' }, `… and ${cells.length - shown.length} more`) : null);
}

async function renderDataset(datasetId) {
  const [dataset, listing] = await Promise.all([
    call('GET', `/v1/datasets/${encodeURIComponent(datasetId)}`),
    mechanisms(),
  ]);
  const budgetSlot = h('div', { class: 'budget-slot' });
  const pathSlot = h('div');
  const pathSection = section('Budget path', pathSlot);
  pathSection.classList.add('path-section');
  pathSection.hidden = true;
  const chartSlot = h('div');
  const tableSlot = h('div');
  const outputSlot = h('div', { class: 'output', 'aria-live': 'polite' });
  const cursors = [null]; // `before` of each page shown so far
  let page = 0;

  const allocations = allocationsPanel(dataset);
  const plan = planPanel(dataset, listing);
  const blocks = dataset.blocks ? blocksPanel(dataset) : null;
  // Cell names are fixed at registration: a listing page's `cells` are the dataset's.
  let pageCells = dataset.cells ?? null;

  const showOutput = (release, pasted) => {
    clear(outputSlot).append(h('h3', {}, `Output of release #${release.seq}`), outputChart(release, outputNames(release, pageCells, pasted)));
  };

  const loadLedger = async () => {
    const [budget, history] = await Promise.all([
      call('GET', `/v1/datasets/${dataset.id}/budget`),
      allReleases(dataset.id),
    ]);
    clear(budgetSlot).append(budgetSummary(dataset, budget, { own: true }));
    if (blocks) await blocks.reload(budget);
    // A dataset in no population has only itself on its path: nothing more to show.
    pathSection.hidden = !(Array.isArray(budget.path) && budget.path.length > 1);
    if (!pathSection.hidden) clear(pathSlot).append(budgetPath(budget.path, { linkPopulations: session()?.role === 'admin' }));
    // A capped history holds the newest releases: the older ones' spend is what the ledger has
    // spent beyond them, so the curve starts there instead of at 0.
    const fetched = history.items.reduce((sum, r) => sum + r.cost.epsilon, 0);
    const before = history.complete ? 0 : Math.max(0, budget.spent - fetched);
    clear(chartSlot).append(spendChart({
      releases: history.items, total: budget.total, order: budget.order, before,
      start: history.complete ? dataset.created_at : (history.items[0]?.created_at ?? dataset.created_at), end: Date.now(),
    }));
    if (!history.complete) chartSlot.append(h('p', { class: 'muted' }, `The chart shows the newest ${history.items.length} releases; the curve starts at the ${before} spent before them.`));
    return history;
  };

  const loadPage = async () => {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (cursors[page] !== null) query.set('before', String(cursors[page]));
    const list = await call('GET', `/v1/datasets/${dataset.id}/releases?${query}`);
    if (Array.isArray(list.cells)) pageCells = list.cells;
    cursors[page + 1] = list.next_before ?? null;
    const rows = list.items.map((r) => h('tr', { 'data-seq': r.seq, 'data-kind': r.kind ?? 'release' },
      h('td', { class: 'num' }, String(r.seq)),
      h('td', {}, r.label ?? h('span', { class: 'muted' }, '—')),
      r.kind === 'external'
        ? h('td', {}, r.mechanism?.mechanism ?? '—', h('span', { class: 'tag external' }, 'external charge'))
        : h('td', {}, r.mechanism?.kind ?? '—', Array.isArray(r.distributions) ? h('span', { class: 'tag' }, `table ×${r.distributions.length}`) : null),
      h('td', { class: 'params' }, mechanismParameters(r.mechanism)),
      h('td', { class: 'num' }, num(r.cost.epsilon)),
      h('td', {}, r.created_by),
      h('td', {}, h('time', { datetime: r.created_at }, when(r.created_at))),
      r.kind === 'external' ? h('td', { class: 'muted' }, 'none: run elsewhere') : h('td', {}, h('button', {
        type: 'button', class: 'secondary small', 'aria-label': `Show the output of release ${r.seq}`,
        onclick: () => { showOutput(r); outputSlot.scrollIntoView({ block: 'nearest' }); announce(`Showing release ${r.seq}.`); },
      }, 'Show'))));
    const older = h('button', { type: 'button', class: 'secondary', disabled: list.next_before == null }, 'Older →');
    const newer = h('button', { type: 'button', class: 'secondary', disabled: page === 0 }, '← Newer');
    older.addEventListener('click', async () => { page += 1; await loadPage(); });
    newer.addEventListener('click', async () => { page -= 1; await loadPage(); });
    clear(tableSlot).append(
      rows.length ? h('div', { class: 'table-scroll' }, h('table', { class: 'releases' },
        h('caption', {}, `Releases, newest first (page ${page + 1})`),
        h('thead', {}, h('tr', {}, ['#', 'Label', 'Mechanism', 'Parameters', 'Cost (ε)', 'Who', 'When', 'Output'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows)))
        : h('p', { class: 'empty' }, 'No releases yet.'),
      h('div', { class: 'pager' }, newer, older));
    return list;
  };

  const form = releaseForm(dataset, listing, async (release, names) => {
    page = 0;
    cursors.length = 1;
    await Promise.all([loadLedger(), loadPage(), allocations.reload()]);
    if (release) {
      plan.stale();
      showOutput(release, names);
    }
  });

  clear(main).append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/' }, '← Datasets')),
    h('h1', {}, dataset.name),
    h('p', { class: 'meta' },
      `Relation: ${dataset.neighbouring.replaceAll('_', ' ')} · order λ = ${num(dataset.budget.order)} · budget ${num(ledgerTotal(dataset))}`,
      dataset.budget.delta != null ? ` (ε ${num(dataset.budget.epsilon)}, δ ${dataset.budget.delta})` : '',
      ` · created ${when(dataset.created_at)} · `, h('code', {}, dataset.id)),
    dataset.cells ? cellNames(dataset.cells) : '', // Element.append writes null as text
    budgetSlot,
    pathSection,
    section('Spend over time', chartSlot),
    blocks ? blocks.element : '',
    allocations.element,
    plan.element,
    section('Preview and release', form),
    section('Releases', tableSlot, outputSlot));
  // The spend chart's history is summaries (no outputs): the newest output is the page's.
  const [, list] = await Promise.all([loadLedger(), loadPage(), allocations.reload()]);
  // External charges have no output to show.
  const newest = list.items.find((r) => r.kind !== 'external');
  if (newest) showOutput(newest);
}

// ------------------------------------------------------------------ admin forms

/** What no name may hold (the service refuses it): controls, invisible format characters
 * (zero-width spaces, byte order marks, direction marks and overrides…), line and paragraph
 * separators. */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

/**
 * The registration form's cell names: one per line (a name may then hold commas), or all on one
 * line separated by commas; blank entries are dropped. Null when none are given. Names are
 * compared as the service stores them (trimmed, in Unicode NFC), so "é" typed precomposed and
 * decomposed is one name, given twice.
 */
function parseCellNames(text) {
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  if (!lines.length) return null;
  const names = (lines.length > 1 ? lines : lines[0].split(',').map((c) => c.trim()).filter(Boolean))
    .map((name) => name.normalize('NFC'));
  if (names.length < 2) {
    throw new Problem(0, { title: 'At least two cell names', detail: 'Name every cell (a release has 2 cells or more), or leave the field empty.' });
  }
  const seen = new Set();
  for (const [i, name] of names.entries()) {
    if (INVISIBLE.test(name)) {
      throw new Problem(0, { title: 'Invisible characters in a cell name', detail: `Cell name ${i + 1} holds a control character, an invisible formatting character (such as a zero-width space or a direction mark) or a line separator: names are shown to people, so they may hold none.` });
    }
    if (seen.has(name)) throw new Problem(0, { title: 'Cell names repeat', detail: `“${name}” is given twice: each name must pick out one cell.` });
    seen.add(name);
  }
  return names;
}

function renderNewDataset() {
  const name = h('input', { type: 'text', required: true, maxlength: 200, autocomplete: 'off' });
  const kind = h('select', {}, h('option', { value: 'rdp' }, 'Rényi-DP: ε at order λ'), h('option', { value: 'dp' }, '(ε, δ)-DP target'));
  const epsilon = numberInput({ min: 0, required: true, value: '1' });
  const order = numberInput({ min: 1, value: '2' });
  const delta = numberInput({ min: 0, max: 1, value: '1e-6' });
  const relation = h('select', {}, h('option', { value: 'replace_one' }, 'replace one record (Δ2² = 2, Δ∞ = 1)'), h('option', { value: 'add_remove_one' }, 'add or remove one record'));
  const blockPeriod = h('select', {}, h('option', { value: '' }, 'no: one lifetime budget'),
    ...['hour', 'day', 'week', 'month'].map((p) => h('option', { value: p }, `by ${p}: a cap per ${p}`)));
  const cells = h('textarea', { rows: 3, spellcheck: 'false', autocomplete: 'off' });
  const cellsCount = h('p', { class: 'hint shape', 'aria-live': 'polite' });
  cells.addEventListener('input', () => {
    try {
      const names = parseCellNames(cells.value);
      cellsCount.textContent = names ? `${names.length} cell names: every release will have ${names.length} cells, labelled with them.` : '';
    } catch (error) {
      cellsCount.textContent = `${error.title}.`;
    }
  });
  const deltaField = field('δ', delta, 'The (ε, δ) target is converted to a Rényi-DP budget at the order (chosen for you when left empty).');
  const orderHint = h('span');
  const sync = () => {
    deltaField.hidden = kind.value !== 'dp';
    order.required = kind.value === 'rdp';
    if (kind.value === 'dp' && order.value === '2') order.value = '';
  };
  kind.addEventListener('change', sync);
  const errors = h('div', { 'aria-live': 'polite' });
  const button = h('button', { type: 'submit' }, 'Register');
  const form = h('form', { class: 'card narrow', method: 'post', novalidate: true },
    h('h1', {}, 'Register a dataset'),
    field('Name', name),
    field('Budget kind', kind),
    field('ε', epsilon),
    field('Order λ', order, orderHint),
    deltaField,
    field('Neighbouring relation', relation),
    field('Split into blocks (optional)', blockPeriod, 'Records arriving over time: each hour, day, week or month of events (UTC) gets its own cap of ε, and a release is charged on every block it reads. Fixed at registration.'),
    field('Cell names (optional)', cells, 'Public names of the cells, in order: one per line, or on one line separated by commas (at least 2, all different, up to 200 characters each). They are stored with the dataset and label every chart; every release must then have exactly this many cells.'),
    cellsCount,
    errors, button);
  orderHint.textContent = 'The ledger keeps every charge at this Rényi order.';
  sync();
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clear(errors);
    const budget = { epsilon: Number(epsilon.value) };
    if (order.value !== '') budget.order = Number(order.value);
    if (kind.value === 'dp') budget.delta = Number(delta.value);
    const body = { name: name.value, budget, neighbouring: relation.value };
    if (blockPeriod.value !== '') body.blocks = { period: blockPeriod.value };
    try {
      const names = parseCellNames(cells.value);
      if (names) body.cells = names;
    } catch (error) {
      errors.append(problemBox(error));
      return;
    }
    busy(button, true);
    try {
      const created = await call('POST', '/v1/datasets', { body });
      announce(`Registered ${created.name}.`);
      location.hash = `#/datasets/${created.id}`;
    } catch (error) {
      errors.append(problemBox(error));
    } finally {
      busy(button, false);
    }
  });
  clear(main).append(form);
  name.focus();
}

async function renderNewToken() {
  const list = await call('GET', '/v1/datasets');
  const boxes = list.items.map((d) => {
    const box = h('input', { type: 'checkbox', value: d.id, id: id('ds') });
    return h('div', { class: 'check' }, box, h('label', { for: box.id }, d.name, ' ', h('code', { class: 'muted' }, d.id.slice(-8))));
  });
  const errors = h('div', { 'aria-live': 'polite' });
  const result = h('div', { 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', disabled: !boxes.length }, 'Create token');
  const form = h('form', { class: 'card narrow', method: 'post', novalidate: true },
    h('h1', {}, 'New analyst token'),
    h('fieldset', {}, h('legend', {}, 'Datasets the token may read and release from'),
      boxes.length ? boxes : h('p', { class: 'empty' }, 'Register a dataset first.')),
    errors, button, result);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clear(errors);
    clear(result);
    const datasets = [...form.querySelectorAll('input[type=checkbox]:checked')].map((b) => b.value);
    busy(button, true);
    try {
      const created = await call('POST', '/v1/tokens', { body: { datasets } });
      const output = h('input', { type: 'text', readonly: true, value: created.token, class: 'token-output', id: id('token'), spellcheck: 'false' });
      const copy = h('button', { type: 'button', class: 'secondary' }, 'Copy');
      const copied = h('span', { class: 'muted', 'aria-live': 'polite' });
      copy.addEventListener('click', async () => {
        try {
          await navigator.clipboard.writeText(output.value);
          copied.textContent = 'Copied.';
        } catch {
          output.select();
          copied.textContent = 'Selected: press Ctrl+C (⌘C) to copy.';
        }
      });
      result.append(h('div', { class: 'token-result' },
        h('p', { class: 'notice' }, h('strong', {}, 'Shown once. '), 'Copy the token now: the service stores only its SHA-256.'),
        h('label', { for: output.id }, `Analyst token ${created.id} for ${created.datasets.length} dataset${created.datasets.length === 1 ? '' : 's'}`),
        h('div', { class: 'copy-row' }, output, copy), copied));
      for (const b of form.querySelectorAll('input[type=checkbox]')) b.checked = false;
      output.focus();
      output.select();
    } catch (error) {
      errors.append(problemBox(error));
    } finally {
      busy(button, false);
    }
  });
  clear(main).append(form);
}

// The form helpers the populations view (populations.js) builds its forms with.
const UI = { field, numberInput, section, busy, problemBox, successBox, announce };

// ------------------------------------------------------------------ routing

// Views render one at a time, in order: a view awaits the API before it fills `main`, so two
// renders running at once (sign-in's route of `#/`, then a hash change while its list is still
// loading) could finish out of order and leave the older view on screen. Each render reads the
// hash when its turn comes, so the last navigation always shows last.
let routing = Promise.resolve();

function route(message) {
  const next = routing.then(() => renderRoute(message));
  routing = next.catch(() => {});
  return next;
}

async function renderRoute(message) {
  const me = session();
  renderFrame();
  if (!me) {
    renderSignIn(message);
    return;
  }
  const hash = location.hash.startsWith('#/') ? location.hash.slice(1) : '/';
  clear(main).append(h('p', { class: 'loading', role: 'status' }, 'Loading…'));
  try {
    const match = hash.match(/^\/datasets\/([0-9a-fA-F-]{36})$/);
    if (match) await renderDataset(match[1]);
    else if (hash === '/new-dataset' && me.role === 'admin') renderNewDataset();
    else if (hash === '/new-token' && me.role === 'admin') await renderNewToken();
    else if (hash === '/populations' && me.role === 'admin') await renderPopulations(main, UI);
    else await renderDatasets();
    const heading = main.querySelector('h1');
    if (heading) document.title = `${heading.textContent} · dirichlet-release console`;
  } catch (error) {
    if (error instanceof Problem && error.status === 401) {
      clearSession();
      renderFrame();
      renderSignIn('The token was refused (401); sign in again.');
      return;
    }
    clear(main).append(h('h1', {}, 'Something went wrong'), problemBox(error), h('p', {}, h('a', { href: '#/' }, 'Back to the datasets')));
  }
}

window.addEventListener('hashchange', () => {
  if (location.hash.startsWith('#/') || location.hash === '') {
    route().then(() => main.focus({ preventScroll: true }));
  }
});
route();
