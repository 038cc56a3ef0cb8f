// Populations: budgets shared by the datasets (and populations) under them. The view at
// #/populations (admin: the API lists populations to the admin only) draws the tree with each
// node's ledger, the datasets under it, which node binds and each node's spend over time, and
// holds the forms to create a population and to put a dataset in one. `budgetPath` draws a
// dataset's budget path on its own page (for any token that may read the dataset).
//
// The form helpers (`field`, `problemBox`, …) are app.js's, passed in as `ui`, so that a
// population form looks and reports problems exactly as the other forms do.

import { call, allReleases } from './api.js';
import { h, num, percent, clear } from './dom.js';
import { budgetBar, spendChart } from './charts.js';

/** A budget as registered, on the ledger grid: its RDP total at the order. */
const specTotal = (budget) => budget.rdp_epsilon ?? budget.epsilon;

const CHILDREN = {
  shared: 'shared: children may hold the same people, their charges add up here',
  disjoint: 'disjoint: each person is in at most one child, only the largest charge counts here',
};

/**
 * A budget path (`GET /v1/datasets/{id}/budget`'s `path`: the dataset, then its population
 * chain to the root) as a list of ledgers, the binding node marked in words as well as colour.
 * `linkPopulations`: the population names link to the populations view (the admin's).
 */
export function budgetPath(path, { linkPopulations = false } = {}) {
  const items = path.map((node, i) => {
    const name = node.kind === 'population' && linkPopulations
      ? h('a', { href: '#/populations' }, node.name)
      : node.name;
    return h('li', { class: ['path-node', node.binding ? 'binding' : null], 'data-id': node.id, 'data-kind': node.kind, 'data-binding': String(node.binding) },
      h('div', { class: 'path-head' },
        h('span', { class: 'tag kind' }, i === 0 ? 'this dataset' : 'population'),
        h('strong', {}, name),
        node.binding ? h('span', { class: 'binding-badge' }, 'binding: limits the next release') : null),
      h('div', { class: 'budget-line' },
        budgetBar(node.spent, node.total, `${node.kind === 'dataset' ? 'Dataset' : 'Population'} ${node.name}`),
        h('p', { class: 'budget-text' },
          h('strong', {}, `${num(node.spent)} of ${num(node.total)}`), ' spent ',
          h('span', { class: 'muted' }, `(${percent(node.spent, node.total)}; ${num(node.remaining)} left)`))));
  });
  return h('div', { class: 'budget-path' },
    h('p', { class: 'hint' }, 'A release is charged to every node below, from this dataset up to the root population, and must fit each.'),
    h('ol', { class: 'path-nodes' }, items));
}

// ------------------------------------------------------------------ spend over time

/** A dataset's cumulative spend as steps [{t, y}] from its releases and charges (oldest first). */
function datasetSeries(items) {
  let y = 0;
  return items.map((r) => {
    y += r.cost.epsilon;
    return { t: Date.parse(r.created_at), y };
  });
}

/**
 * The series of a node from its children's: at each instant, the sum of what the children had
 * spent (shared) or the largest (disjoint), which is how the ledger charges a node.
 */
function combine(children, mode) {
  const times = [...new Set(children.flatMap((series) => series.map((p) => p.t)))].sort((a, b) => a - b);
  const at = (series, t) => {
    let value = 0;
    for (const p of series) {
      if (p.t > t) break;
      value = p.y;
    }
    return value;
  };
  return times.map((t) => {
    const values = children.map((series) => at(series, t));
    return { t, y: mode === 'disjoint' ? Math.max(0, ...values) : values.reduce((a, b) => a + b, 0) };
  });
}

/** A series as the step list spendChart draws (one step per increase). */
function steps(series) {
  const out = [];
  let last = 0;
  for (const p of series) {
    if (p.y > last) out.push({ seq: out.length + 1, created_at: new Date(p.t).toISOString(), cost: { epsilon: p.y - last } });
    last = Math.max(last, p.y);
  }
  return out;
}

// ------------------------------------------------------------------ the view

/**
 * The populations page. `ui` holds app.js's form helpers: field, numberInput, section, busy,
 * problemBox, successBox, announce.
 */
export async function renderPopulations(main, ui, { message, focus } = {}) {
  const [{ populations }, { items: datasets }] = await Promise.all([
    call('GET', '/v1/populations'),
    call('GET', '/v1/datasets'),
  ]);
  const byId = new Map(populations.map((p) => [p.id, p]));
  const children = new Map(populations.map((p) => [p.id, []]));
  const roots = [];
  for (const p of populations) {
    if (p.parent && children.has(p.parent)) children.get(p.parent).push(p);
    else roots.push(p);
  }
  const members = new Map(populations.map((p) => [p.id, []]));
  for (const d of datasets) if (d.population && members.has(d.population)) members.get(d.population).push(d);
  const placed = datasets.filter((d) => d.population && members.has(d.population));

  // Each placed dataset's path tells which node binds it; its releases and charges give the
  // spend curves.
  const [budgets, histories] = await Promise.all([
    Promise.all(placed.map((d) => call('GET', `/v1/datasets/${d.id}/budget`))),
    Promise.all(placed.map((d) => allReleases(d.id, 5000))),
  ]);
  const budgetOf = new Map(placed.map((d, i) => [d.id, budgets[i]]));
  const seriesOf = new Map(placed.map((d, i) => [d.id, datasetSeries(histories[i].items)]));
  const complete = histories.every((history) => history.complete);
  const bindingFor = new Map(); // node id → names of the datasets it binds
  for (const d of placed) {
    for (const node of budgetOf.get(d.id).path ?? []) {
      if (!node.binding) continue;
      if (!bindingFor.has(node.id)) bindingFor.set(node.id, []);
      bindingFor.get(node.id).push(d.name);
    }
  }
  const nodeSeries = new Map();
  const seriesFor = (p) => {
    if (!nodeSeries.has(p.id)) {
      const parts = [...members.get(p.id).map((d) => seriesOf.get(d.id)), ...children.get(p.id).map(seriesFor)];
      nodeSeries.set(p.id, combine(parts, p.children));
    }
    return nodeSeries.get(p.id);
  };

  const datasetRow = (d) => {
    const b = budgetOf.get(d.id);
    const binds = bindingFor.get(d.id);
    return h('li', { class: ['tree-dataset', binds ? 'binding' : null], 'data-id': d.id },
      h('span', { class: 'tag kind' }, 'dataset'),
      h('a', { href: `#/datasets/${d.id}` }, d.name), ' ',
      h('span', { class: 'muted' }, `${num(b.spent)} of ${num(b.total)} spent, ${num(b.remaining)} left`),
      binds ? h('span', { class: 'binding-badge' }, 'binding: its own budget limits it') : null);
  };

  const nodeItem = (p) => {
    const total = specTotal(p.budget);
    const remaining = Math.max(0, total - p.spent);
    const binds = bindingFor.get(p.id);
    const series = seriesFor(p);
    const drawn = steps(series);
    const rebuilt = series.length ? series[series.length - 1].y : 0;
    const kids = children.get(p.id);
    const own = members.get(p.id);
    const chart = spendChart({ releases: drawn, total, order: p.budget.order, start: p.created_at, end: Date.now() });
    chart.classList.add('small');
    return h('li', { class: ['population-node', binds ? 'binding' : null], id: `population-${p.id}`, 'data-id': p.id, 'data-name': p.name, 'data-children': p.children },
      h('div', { class: 'node-card' },
        h('div', { class: 'path-head' },
          h('span', { class: 'tag kind' }, 'population'),
          h('strong', { class: 'node-name' }, p.name),
          h('span', { class: ['tag', `children-${p.children}`], title: CHILDREN[p.children] ?? p.children }, p.children),
          binds ? h('span', { class: 'binding-badge', title: `The least remaining on the budget path of ${binds.join(', ')}` }, `binding for ${binds.length} dataset${binds.length === 1 ? '' : 's'}`) : null),
        h('div', { class: 'budget-line' },
          budgetBar(p.spent, total, `Population ${p.name}`),
          h('p', { class: 'budget-text node-figures' },
            h('strong', {}, `${num(p.spent)} of ${num(total)}`), ` spent at λ = ${num(p.budget.order)} `,
            h('span', { class: 'muted' }, `(${percent(p.spent, total)}; ${num(remaining)} left)`))),
        h('p', { class: 'hint' }, CHILDREN[p.children] ?? p.children, '.'),
        h('details', { class: 'node-spend' },
          h('summary', {}, 'Spend over time'),
          chart,
          Math.abs(rebuilt - p.spent) > 1e-9 * Math.max(1, total) || !complete
            ? h('p', { class: 'muted' }, `Rebuilt from the releases and charges of the datasets under it now (${num(rebuilt)}); the ledger holds ${num(p.spent)}: the difference was charged when datasets or populations were attached or moved, or by datasets since taken out${complete ? '' : ', or is older than the releases read'}.`)
            : null),
        own.length ? h('ul', { class: 'tree-datasets', 'aria-label': `Datasets in ${p.name}` }, own.map(datasetRow)) : null),
      kids.length ? h('ul', { class: 'tree', 'aria-label': `Populations under ${p.name}` }, kids.map(nodeItem)) : null);
  };

  const tree = roots.length
    ? h('ul', { class: 'tree population-tree', 'aria-label': 'Populations' }, roots.map(nodeItem))
    : h('p', { class: 'empty' }, 'No populations yet: create one below.');

  clear(main).append(
    h('h1', {}, 'Populations'),
    h('p', { class: 'meta' }, 'A population is a budget shared by the datasets (and populations) under it: a release on a dataset is charged to the dataset and to every population above it, and must fit each. All amounts are Rényi-DP ε at the ledger order.'),
    message ? ui.successBox(message) : null,
    ui.section('Tree', tree),
    createForm(main, ui, populations),
    attachForm(main, ui, populations, datasets, byId));
  if (focus) main.querySelector(`#population-${focus}`)?.scrollIntoView({ block: 'center' });
}

function populationOptions(populations, none) {
  return [h('option', { value: '' }, none), ...populations.map((p) => h('option', { value: p.id }, `${p.name} (λ = ${num(p.budget.order)}, ${p.children})`))];
}

function createForm(main, ui, populations) {
  const name = h('input', { type: 'text', required: true, maxlength: 200, autocomplete: 'off' });
  const epsilon = ui.numberInput({ min: 0, required: true, value: '1' });
  const order = ui.numberInput({ min: 1, required: true, value: '2' });
  const parent = h('select', {}, populationOptions(populations, 'none: a root'));
  const children = h('select', {},
    h('option', { value: 'shared' }, 'shared: children may overlap (sum)'),
    h('option', { value: 'disjoint' }, 'disjoint: children hold different people (max)'));
  parent.addEventListener('change', () => {
    const chosen = populations.find((p) => p.id === parent.value);
    if (chosen) order.value = String(chosen.budget.order);
  });
  const errors = h('div', { 'aria-live': 'polite' });
  const button = h('button', { type: 'submit' }, 'Create population');
  const form = h('form', { class: 'population-form', method: 'post', novalidate: true },
    ui.field('Name', name),
    ui.field('Budget ε (Rényi DP)', epsilon),
    ui.field('Order λ', order, "A population's order must be its parent's, and a dataset's must be its population's."),
    ui.field('Parent population', parent),
    ui.field('Children', children, 'How the charges of what is under it add up.'),
    errors, button);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clear(errors);
    const body = {
      name: name.value,
      budget: { epsilon: Number(epsilon.value), order: Number(order.value) },
      children: children.value,
    };
    if (parent.value) body.parent = parent.value;
    ui.busy(button, true);
    try {
      const created = await call('POST', '/v1/populations', { body });
      ui.announce(`Created population ${created.name}.`);
      await renderPopulations(main, ui, { message: `Created population ${created.name}.`, focus: created.id });
    } catch (error) {
      errors.append(ui.problemBox(error));
    } finally {
      ui.busy(button, false);
    }
  });
  return ui.section('Create a population', form);
}

function attachForm(main, ui, populations, datasets, byId) {
  const dataset = h('select', { required: true },
    datasets.map((d) => h('option', { value: d.id }, `${d.name} (λ = ${num(d.budget.order)}${d.population ? `, in ${byId.get(d.population)?.name ?? 'a population'}` : ''})`)));
  const population = h('select', {}, populationOptions(populations, 'none: take it out of its population'));
  const errors = h('div', { 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', disabled: !datasets.length }, 'Place dataset');
  const form = h('form', { class: 'attach-form', method: 'post', novalidate: true },
    ui.field('Dataset', dataset),
    ui.field('Population', population, 'What the dataset has spent so far is charged to every population on its new path, and must fit each; taking it out or moving it gives nothing back to the old path.'),
    errors, button);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    clear(errors);
    ui.busy(button, true);
    try {
      const placed = await call('PUT', `/v1/datasets/${encodeURIComponent(dataset.value)}/population`, { body: { population: population.value || null } });
      const where = placed.population ? `in ${byId.get(placed.population)?.name ?? placed.population}` : 'in no population';
      ui.announce(`${placed.name} is now ${where}.`);
      await renderPopulations(main, ui, { message: `${placed.name} is now ${where}.`, focus: placed.population });
    } catch (error) {
      errors.append(ui.problemBox(error));
    } finally {
      ui.busy(button, false);
    }
  });
  return ui.section('Put a dataset in a population', datasets.length ? form : h('p', { class: 'empty' }, 'Register a dataset first.'));
}
