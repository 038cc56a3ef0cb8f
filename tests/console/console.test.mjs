// End-to-end test of /console in the system's headless Chromium, driven by playwright-core.
// scripts/ci/console-test.sh starts the server and sets BASE, ADMIN, OUT and CHROMIUM.
//
// The scenario: sign in as the admin, register two datasets and one with named cells, create an
// analyst token for two of them, preview and release twice (the spend chart moves), give analyst
// tokens allocations on the named dataset (set, edit, remove, a 422 and a 404, the history),
// release a table with named rows there (the dataset's cell names label the heat map, now and
// from the stored release), plan releases there (the rendered plan is the API's for the same
// request, an unreachable target is explained, a 422 names the field, nothing is charged), do
// the README walkthrough's table step (a labelled table previewed
// row by row and released for one charge, drawn as a heat map), sort the datasets by remaining
// budget, sign in as the analyst (by keyboard) and see only their datasets and their own
// allocation (a plan is checked against it), preview a release that does not fit, see a 409 refusal when another client spends
// the budget between preview and release, and a distinct 409 when the admin lowers the analyst's
// allocation between preview and release. Then, against the service's own listing of mechanisms
// (GET /v1/mechanisms), every listed mechanism in the release form and the planner with its own
// fields, an exponential, an explicit and a smoothed gaussian release through the form, and a
// plan of explicit by its fields and of auto and gaussian by a KL target. Then populations: a root,
// a disjoint child and a small one created through the forms, datasets placed by the form (a 409
// when what a dataset spent does not fit), the tree with each node's spend, the binding node and
// each node's spend over time, and a dataset's budget path with its external charge.
// Throughout: no request URL carries a token, nothing is written to localStorage or cookies,
// every /console response carries the security headers, no CSP violation or script error occurs,
// and every form control has a label. Screenshots go to $OUT.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { chromium } from 'playwright-core';

const BASE = process.env.BASE;
const ADMIN = process.env.ADMIN;
const OUT = process.env.OUT || 'target/console-artifacts';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
assert.ok(BASE && ADMIN, 'set BASE and ADMIN');
mkdirSync(OUT, { recursive: true });

// The mechanisms as the service lists them (public): every expectation about the forms' mechanisms
// and their fields comes from here, none from a copy in this test.
const listing = (await (await fetch(`${BASE}/v1/mechanisms`)).json()).mechanisms;
assert.ok(Array.isArray(listing) && listing.length >= 2, 'GET /v1/mechanisms lists the mechanisms');
const listed = (name) => listing.find((m) => m.name === name);

const secrets = [ADMIN];
const problems = [];
const consoleResponses = [];
let releaseKeys = [];
const releaseBodies = [];
const listQueries = [];
const registrations = [];
const planBodies = [];

function step(name) {
  console.log(`  - ${name}`);
}

async function api(method, path, token, body) {
  const response = await fetch(`${BASE}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** The texts of a chart's axis labels of `kind` ('row-label', 'col-label', or any). */
async function axisLabels(chart, kind) {
  return chart.locator(kind ? `text.axis-label.${kind}` : 'text.axis-label').allTextContents();
}

function watch(page) {
  page.on('request', (request) => {
    const url = request.url();
    for (const secret of secrets) {
      if (url.includes(secret) || url.includes(encodeURIComponent(secret))) {
        problems.push(`a token in a request URL: ${request.method()} ${url.replace(secret, '<token>')}`);
      }
    }
    if (url.includes('dra_')) problems.push(`an analyst token prefix in a URL: ${url}`);
    const path = new URL(url).pathname;
    if (path.startsWith('/console') && request.headers().authorization) {
      problems.push(`a console asset request carried Authorization: ${path}`);
    }
    if (request.method() === 'POST' && /\/releases$/.test(path)) {
      releaseKeys.push(request.headers()['idempotency-key']);
      releaseBodies.push(request.postDataJSON());
    }
    if (request.method() === 'GET' && /\/releases$/.test(path)) listQueries.push(new URL(url).search);
    if (request.method() === 'POST' && path === '/v1/datasets') registrations.push(request.postDataJSON());
    if (request.method() === 'POST' && /\/plan$/.test(path)) planBodies.push(request.postDataJSON());
  });
  page.on('response', (response) => {
    const path = new URL(response.url()).pathname;
    if (path === '/console' || path.startsWith('/console/')) consoleResponses.push(response);
  });
  page.on('console', (message) => {
    const text = message.text();
    // A refused fetch (the 409 this test provokes) is logged by Chromium as a failed resource.
    if (message.type() === 'error' && !/Failed to load resource: the server responded with a status of 4\d\d/.test(text)) {
      problems.push(`browser console error: ${text}`);
    }
  });
  page.on('pageerror', (error) => problems.push(`script error: ${error.message}`));
}

async function assertLabelled(page, where) {
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter((el) => !el.closest('[hidden]'))
    .filter((el) => {
      if (el.tagName === 'BUTTON') return !(el.textContent.trim() || el.getAttribute('aria-label'));
      return !(el.labels && el.labels.length) && !el.getAttribute('aria-label');
    })
    .map((el) => el.outerHTML.slice(0, 120)));
  assert.deepEqual(unlabelled, [], `controls without a label on ${where}`);
}

/** No stray `null` or `undefined` text (a missing value written out) on the page. */
async function assertNoStrayText(page, where) {
  const text = await page.locator('main').innerText();
  assert.doesNotMatch(text, /\bnull\b|\bundefined\b|\bNaN\b|\[object /, `stray text on ${where}`);
}

async function assertNoStoredToken(page, where) {
  const storage = await page.evaluate(() => ({
    local: Object.keys(localStorage).length,
    cookie: document.cookie,
    session: JSON.stringify(Object.fromEntries(Object.entries(sessionStorage))),
  }));
  assert.equal(storage.local, 0, `localStorage is used (${where})`);
  assert.equal(storage.cookie, '', `a cookie is set (${where})`);
  return storage.session;
}

async function signIn(page, token) {
  await page.getByLabel('Bearer token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

async function spend(page) {
  const chart = page.locator('svg.spend-chart');
  await chart.waitFor();
  return { points: Number(await chart.getAttribute('data-points')), spent: Number(await chart.getAttribute('data-spent')) };
}

/** A number as the console shows it (dom.js `num`). */
function shown(x) {
  if (x === 0) return '0';
  if (Math.abs(x) < 1e-4 || Math.abs(x) >= 1e7) return x.toExponential(2).replace('e', '×10^').replace('+', '');
  return Number(x.toPrecision(4)).toLocaleString('en', { maximumFractionDigits: 12 });
}

/** A plan forecast as the console shows it: ℓ2 at its confidence, cell sd, and KL when bounded. */
function forecastShown(f) {
  return `ℓ2 ≤ ${shown(f.l2)} (p ${shown(f.confidence)}), cell sd ≤ ${shown(f.cell_sd)}${f.kl === undefined ? '' : `, KL ≤ ${shown(f.kl)}`}`;
}

/** Fills the planner's item `i` (adding it if needed): only the fields given are touched. */
async function planItem(section, i, { d, n, lowerBound, rows, mechanism, goal, value, confidence }) {
  const items = section.locator('fieldset.plan-item');
  if (await items.count() <= i) await section.getByRole('button', { name: 'Add an item' }).click();
  const item = items.nth(i);
  if (d !== undefined) await item.getByLabel('d (cells)').fill(String(d));
  if (n !== undefined) await item.getByLabel('n (public total)').fill(String(n));
  if (lowerBound !== undefined) await item.getByLabel('n is a public lower bound of the total').setChecked(lowerBound);
  if (rows !== undefined) await item.getByLabel('Rows (a table)').fill(String(rows));
  if (mechanism !== undefined) await item.getByLabel('Mechanism').selectOption(mechanism);
  if (goal !== undefined) await item.getByLabel('Plan by').selectOption(goal);
  if (value !== undefined) await item.getByLabel(/^(ε \(at λ = |ℓ2 error ≤|Cell sd ≤|KL divergence ≤)/).fill(String(value));
  if (confidence !== undefined) await item.getByLabel('Confidence').fill(String(confidence));
  return item;
}

/** Submits the planner and checks what it shows against the API's answer to the request sent. */
async function planAndCompare(page, section, token) {
  const sentBefore = planBodies.length;
  await section.getByRole('button', { name: 'Plan', exact: true }).click();
  const totals = section.locator('dl.plan-totals');
  await totals.waitFor();
  assert.equal(planBodies.length, sentBefore + 1);
  const request = planBodies[planBodies.length - 1];
  const datasetId = new URL(page.url()).hash.split('/').pop();
  const live = await api('POST', `/v1/datasets/${datasetId}/plan`, token, request);
  assert.equal(live.status, 200, JSON.stringify(live.body));
  const answer = live.body;
  const rows = section.locator('table.plan-results tbody tr');
  assert.equal(await rows.count(), answer.items.length);
  for (const [i, item] of answer.items.entries()) {
    const row = rows.nth(i);
    assert.equal(await row.getAttribute('data-status'), item.status, `item ${i}'s status`);
    assert.match(await row.locator('td.mechanism').textContent(), new RegExp(`^${item.mechanism}`), `item ${i}'s mechanism`);
    if (item.status === 'planned') {
      if (item.epsilon === undefined) {
        // Its fields fix it (explicit's r and α): no ε to ask for.
        assert.equal(await row.locator('td.epsilon').getAttribute('data-value'), null, `item ${i} has no ε`);
        assert.equal(await row.locator('td.epsilon').textContent(), 'none', `item ${i}'s ε as shown`);
      } else {
        assert.equal(Number(await row.locator('td.epsilon').getAttribute('data-value')), item.epsilon, `item ${i}'s ε`);
        assert.equal(await row.locator('td.epsilon').textContent(), shown(item.epsilon), `item ${i}'s ε as shown`);
      }
      assert.equal(await row.locator('td.cost').textContent(), shown(item.cost), `item ${i}'s cost as shown`);
      assert.equal(await row.locator('td.forecast').textContent(), forecastShown(item.forecast));
    } else {
      assert.equal(await row.locator('td.epsilon').textContent(), '—');
      assert.match(await row.locator('td.forecast').textContent(), /Unreachable/);
    }
  }
  assert.equal(await totals.getAttribute('data-fits'), String(answer.fits));
  assert.equal(Number(await totals.locator('dd.total-cost').getAttribute('data-value')), answer.total_cost);
  assert.equal(await totals.locator('dd.total-cost').textContent(), `ε ${shown(answer.total_cost)} at order λ = ${shown(answer.order)}`);
  assert.equal(Number(await totals.locator('dd.remaining').getAttribute('data-value')), answer.remaining);
  assert.ok((await totals.locator('dd.remaining').textContent()).startsWith(`${shown(answer.remaining)} (`));
  assert.match(await totals.locator('dd.fits').textContent(), answer.fits ? /^✓ Yes/ : /^✗ No/);
  return { request, answer };
}

async function previewAndRelease(page, counts, epsilon) {
  await page.getByLabel('Counts').fill(counts);
  await page.getByLabel('ε (privacy cost to calibrate to)').fill(String(epsilon));
  await page.getByRole('button', { name: 'Preview' }).click();
  const preview = page.locator('dl.preview');
  await preview.waitFor();
  return preview;
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE });
  const page = await context.newPage();
  watch(page);

  step('the console loads and asks for a token');
  await page.goto(`${BASE}/console`);
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  await assertLabelled(page, 'sign-in');
  await page.screenshot({ path: `${OUT}/sign-in.png` });

  step('a wrong token is refused with the problem title and detail');
  await page.getByLabel('Bearer token').fill('not-the-admin-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  const refusedSignIn = page.locator('.problem');
  await refusedSignIn.waitFor();
  assert.equal(await refusedSignIn.getAttribute('data-status'), '401');
  assert.match(await refusedSignIn.textContent(), /Unauthorized.*a valid bearer token is required/s);

  step('sign in as the admin');
  await signIn(page, ADMIN);
  await page.getByRole('heading', { name: 'Datasets' }).waitFor();
  assert.match(await page.locator('.role').textContent(), /Admin/);
  const adminSession = await assertNoStoredToken(page, 'after admin sign-in');
  assert.ok(adminSession.includes(ADMIN), 'the token is kept in sessionStorage');

  step('register an RDP dataset and an (ε, δ) dataset');
  await page.getByRole('link', { name: 'Register dataset' }).click();
  await page.getByLabel('Name', { exact: true }).fill('visits per diagnosis');
  await page.getByLabel('ε', { exact: true }).fill('1');
  await page.getByLabel('Order λ').fill('2');
  await assertLabelled(page, 'register');
  await page.getByRole('button', { name: 'Register' }).click();
  await page.getByRole('heading', { name: 'visits per diagnosis' }).waitFor();
  const visitsId = new URL(page.url()).hash.split('/').pop();
  assert.match(visitsId, /^[0-9a-f-]{36}$/);
  assert.deepEqual(await spend(page), { points: 0, spent: 0 });

  await page.getByRole('link', { name: 'Register dataset' }).click();
  await page.getByLabel('Name', { exact: true }).fill('survey answers');
  await page.getByLabel('Budget kind').selectOption('dp');
  await page.getByLabel('ε', { exact: true }).fill('3');
  await page.getByLabel('δ').fill('1e-6');
  await page.getByLabel('Neighbouring relation').selectOption('add_remove_one');
  await page.getByRole('button', { name: 'Register' }).click();
  await page.getByRole('heading', { name: 'survey answers' }).waitFor();
  assert.match(await page.locator('.budget-summary').textContent(), /\(ε, δ\)|δ = 0\.000001|δ = 1e-6/);

  step('register a dataset with named cells (a repeated name and a 422 first)');
  const cellNames = ['influenza', 'common cold', 'measles', 'mumps', 'covid-19', 'other'];
  await page.getByRole('link', { name: 'Register dataset' }).click();
  await page.getByLabel('Name', { exact: true }).fill('clinic visits');
  await page.getByLabel('ε', { exact: true }).fill('2');
  await page.getByLabel('Order λ').fill('2');
  await assertLabelled(page, 'register with cells');
  const sentRegistrations = registrations.length;
  await page.getByLabel('Cell names (optional)').fill('influenza, common cold, influenza');
  assert.match(await page.locator('.hint.shape').textContent(), /Cell names repeat/);
  await page.getByRole('button', { name: 'Register' }).click();
  let problem = page.locator('.problem');
  await problem.waitFor();
  assert.match(await problem.locator('.problem-title').textContent(), /Cell names repeat/);
  assert.match(await problem.locator('.problem-detail').textContent(), /“influenza” is given twice/);
  assert.equal(registrations.length, sentRegistrations, 'a repeated name is caught before sending');
  // Alike once normalised (NFC), as the service compares them: "é" precomposed and decomposed.
  await page.getByLabel('Cell names (optional)').fill('caf\u00e9, cafe\u0301');
  assert.match(await page.locator('.hint.shape').textContent(), /Cell names repeat/);
  await page.getByLabel('Cell names (optional)').fill('influenza, influenza\u200b');
  assert.match(await page.locator('.hint.shape').textContent(), /Invisible characters in a cell name/);
  await page.getByRole('button', { name: 'Register' }).click();
  await page.locator('.problem-title', { hasText: 'Invisible characters' }).waitFor();
  assert.equal(registrations.length, sentRegistrations, 'an invisible character is caught before sending');
  await page.getByLabel('Cell names (optional)').fill(`influenza, ${'x'.repeat(201)}`);
  await page.getByRole('button', { name: 'Register' }).click();
  problem = page.locator('.problem[data-status="422"]');
  await problem.waitFor();
  assert.match(await problem.textContent(), /cells/);
  assert.deepEqual(registrations[registrations.length - 1].cells, ['influenza', 'x'.repeat(201)]);
  await page.getByLabel('Cell names (optional)').fill(cellNames.join('\n'));
  assert.match(await page.locator('.hint.shape').textContent(), /^6 cell names/);
  await page.getByRole('button', { name: 'Register' }).click();
  await page.getByRole('heading', { name: 'clinic visits' }).waitFor();
  const clinicId = new URL(page.url()).hash.split('/').pop();
  assert.match(clinicId, /^[0-9a-f-]{36}$/);
  assert.deepEqual(registrations[registrations.length - 1].cells, cellNames, 'one name per line');
  assert.deepEqual(await page.locator('.cell-names li').allTextContents(), cellNames, 'the dataset page shows its cell names');
  assert.deepEqual((await api('GET', `/v1/datasets/${clinicId}`, ADMIN)).body.cells, cellNames);

  step('an invalid registration shows the 422 problem');
  await page.getByRole('link', { name: 'Register dataset' }).click();
  await page.getByLabel('Name', { exact: true }).fill('broken');
  await page.getByLabel('ε', { exact: true }).fill('-1');
  await page.getByRole('button', { name: 'Register' }).click();
  const invalid = page.locator('.problem');
  await invalid.waitFor();
  assert.equal(await invalid.getAttribute('data-status'), '422');
  assert.match(await invalid.textContent(), /Invalid request/);

  step('create an analyst token for the first dataset (shown once, copyable)');
  await page.getByRole('link', { name: 'New analyst token' }).click();
  await page.getByLabel(/visits per diagnosis/).check();
  await page.getByLabel(/clinic visits/).check();
  await assertLabelled(page, 'new token');
  await page.getByRole('button', { name: 'Create token' }).click();
  const tokenField = page.locator('input.token-output');
  await tokenField.waitFor();
  const analyst = await tokenField.inputValue();
  assert.match(analyst, /^dra_[0-9a-f]+_/);
  secrets.push(analyst);
  const analystId = (await api('GET', '/v1/whoami', analyst)).body.token_id;
  assert.match(await page.locator('.token-result label').textContent(), new RegExp(`${analystId} for 2 datasets`));
  await page.getByRole('button', { name: 'Copy' }).click();
  await page.getByText('Copied.').waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), analyst);
  await page.screenshot({ path: `${OUT}/token.png` });

  step('preview and release twice: the spend chart moves');
  await page.goto(`${BASE}/console#/datasets/${visitsId}`);
  await page.getByRole('heading', { name: 'visits per diagnosis' }).waitFor();
  assert.equal((await spend(page)).points, 0);
  let preview = await previewAndRelease(page, '120, 45, 3, 0, 17, 9', 0.4);
  assert.equal(await preview.getAttribute('data-admissible'), 'true');
  assert.match(await preview.locator('.cost').textContent(), /ε 0\.4 at order λ = 2/);
  assert.match(await preview.textContent(), /Forecast ℓ2 error/);
  assert.equal((await spend(page)).points, 0, 'a preview spends nothing');
  await assertLabelled(page, 'dataset');
  await page.getByRole('button', { name: /Release \(spends ε 0\.4\)/ }).click();
  await page.getByText(/Released #1/).waitFor();
  await page.locator('svg.spend-chart[data-points="1"]').waitFor();
  assert.ok(Math.abs((await spend(page)).spent - 0.4) < 1e-9);
  await page.locator('svg.bar-chart[data-cells="6"]').waitFor();

  preview = await previewAndRelease(page, 'flu,cold,measles,mumps,covid,other\n118,47,3,1,17,9', 0.4);
  await page.getByRole('button', { name: /Release \(spends/ }).click();
  await page.getByText(/Released #2/).waitFor();
  await page.locator('svg.spend-chart[data-points="2"]').waitFor();
  assert.ok(Math.abs((await spend(page)).spent - 0.8) < 1e-9);
  assert.match(await page.locator('svg.bar-chart').textContent(), /measles/, 'CSV header names label the bars');
  assert.equal(await page.locator('table.releases tbody tr').count(), 2);
  assert.equal(releaseKeys.length, 2);
  for (const key of releaseKeys) assert.match(key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.notEqual(releaseKeys[0], releaseKeys[1], 'a fresh Idempotency-Key per previewed release');
  await page.getByRole('button', { name: 'Show the output of release 1' }).click();
  await page.locator('figcaption', { hasText: 'Release #1' }).waitFor();
  await assertNoStrayText(page, 'a dataset without cell names');
  await page.screenshot({ path: `${OUT}/dataset.png`, fullPage: true });
  // The spend chart reads release summaries, never every output; only the paged table does.
  assert.ok(listQueries.some((q) => /fields=summary/.test(q)), `listings seen: ${listQueries}`);
  assert.ok(listQueries.filter((q) => !/fields=summary/.test(q)).every((q) => /limit=10(&|$)/.test(q)), `listings seen: ${listQueries}`);

  step('allocations: the admin sets, edits and removes them, sees problems and the history');
  // More analyst tokens on the named dataset, one revoked, and one for another dataset only.
  const newToken = async (datasets) => {
    const created = await api('POST', '/v1/tokens', ADMIN, { datasets });
    assert.equal(created.status, 201);
    secrets.push(created.body.token);
    return created.body.id;
  };
  const [tokenB, tokenC, tokenD, revoked, elsewhere] = [
    await newToken([clinicId]), await newToken([clinicId]), await newToken([clinicId, visitsId]),
    await newToken([clinicId]), await newToken([visitsId]),
  ];
  assert.equal((await api('DELETE', `/v1/tokens/${revoked}`, ADMIN)).status, 204);
  await page.goto(`${BASE}/console#/datasets/${clinicId}`);
  await page.getByRole('heading', { name: 'clinic visits' }).waitFor();
  const allocationsSection = page.locator('section.allocations-section');
  await allocationsSection.getByText("No allocations: every analyst token draws on the dataset's budget.").waitFor();
  await assertLabelled(page, 'allocations');
  const tokenSelect = page.getByLabel('Analyst token');
  const offered = (await tokenSelect.locator('option').evaluateAll((options) => options.map((o) => o.value))).filter(Boolean);
  assert.deepEqual(offered.sort(), [analystId, tokenB, tokenC, tokenD].sort(), 'only live analyst tokens scoped to the dataset are offered');
  assert.ok(!offered.includes(revoked) && !offered.includes(elsewhere));
  const allocationRow = (token) => allocationsSection.locator(`table.allocations tbody tr[data-token="${token}"]`);
  const setAllocation = async (token, epsilon) => {
    await tokenSelect.selectOption(token);
    await page.getByLabel(/^Allocation ε/).fill(String(epsilon));
    await page.getByRole('button', { name: 'Save allocation' }).click();
  };
  for (const [token, epsilon] of [[analystId, 0.3], [tokenB, 0.5], [tokenC, 0.1], [tokenD, 0.2]]) {
    await setAllocation(token, epsilon);
    await allocationsSection.locator('.success', { hasText: `Allocation of ${token} set to ε ${epsilon}` }).waitFor();
    await allocationRow(token).waitFor();
  }
  assert.deepEqual(await allocationRow(analystId).locator('td.num').allTextContents(), ['0.3', '0', '0.3']);
  assert.equal(await allocationsSection.locator('table.allocations tbody tr').count(), 4);
  assert.match(await tokenSelect.locator(`option[value="${tokenB}"]`).textContent(), /allocation ε 0\.5/);
  // An invalid allocation: the service's 422, shown like every form's problems; nothing changes.
  await setAllocation(tokenB, -1);
  problem = allocationsSection.locator('.problem[data-status="422"]');
  await problem.waitFor();
  assert.match(await problem.textContent(), /Invalid request.*epsilon/s);
  assert.deepEqual(await allocationRow(tokenB).locator('td.num').allTextContents(), ['0.5', '0', '0.5']);
  // Edit: the form takes the token and its allocation, and the focus.
  await page.getByRole('button', { name: `Edit the allocation of ${analystId}` }).click();
  assert.equal(await tokenSelect.inputValue(), analystId);
  assert.equal(await page.getByLabel(/^Allocation ε/).inputValue(), '0.3');
  assert.equal(await page.evaluate(() => document.activeElement.labels?.[0]?.textContent), 'Allocation ε (at λ = 2)');
  await page.getByLabel(/^Allocation ε/).fill('0.25');
  await page.keyboard.press('Enter');
  await allocationsSection.locator('.success', { hasText: `Allocation of ${analystId} set to ε 0.25` }).waitFor();
  assert.deepEqual(await allocationRow(analystId).locator('td.num').allTextContents(), ['0.25', '0', '0.25']);
  // Remove one.
  await page.getByRole('button', { name: `Remove the allocation of ${tokenC}` }).click();
  await allocationsSection.locator('.success', { hasText: `Removed the allocation of ${tokenC}` }).waitFor();
  assert.equal(await allocationRow(tokenC).count(), 0);
  assert.match(await tokenSelect.locator(`option[value="${tokenC}"]`).textContent(), /no allocation/);
  // Removed meanwhile by another client: the 404 is shown and the list catches up.
  assert.equal((await api('DELETE', `/v1/datasets/${clinicId}/allocations/${tokenD}`, ADMIN)).status, 204);
  await page.getByRole('button', { name: `Remove the allocation of ${tokenD}` }).click();
  problem = allocationsSection.locator('.problem[data-status="404"]');
  await problem.waitFor();
  assert.match(await problem.textContent(), /no allocation/);
  await allocationRow(tokenD).waitFor({ state: 'detached' });
  assert.deepEqual(
    (await allocationsSection.locator('table.allocations tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.token))).sort(),
    [analystId, tokenB].sort(),
  );
  // The history, newest first: who, when, old → new.
  const history = allocationsSection.locator('table.allocation-changes tbody tr');
  assert.equal(await history.count(), 7);
  const historyRow = async (i) => (await history.nth(i).locator('td').allTextContents()).slice(1);
  assert.deepEqual(await historyRow(0), [tokenD, '0.2', 'none', 'admin']);
  assert.deepEqual(await historyRow(1), [tokenC, '0.1', 'none', 'admin']);
  assert.deepEqual(await historyRow(2), [analystId, '0.3', '0.25', 'admin']);
  assert.deepEqual(await historyRow(6), [analystId, 'none', '0.3', 'admin']);
  assert.match(await history.nth(0).locator('time').getAttribute('datetime'), /^\d{4}-\d\d-\d\dT/);

  step('a table with named rows on the named dataset: its cell names label the heat map');
  await page.getByLabel('Counts').fill('1, 2, 3');
  assert.match(await page.locator('.names-warning').textContent(), /has 6 named cells .* the line has 3 values/);
  await page.getByLabel('Counts').fill([
    'age, flu, cold, measles, mumps, covid, other',
    '0-17, 40, 12, 1, 0, 5, 2',
    '18-64, 55, 20, 1, 0, 8, 4',
    '65+, 25, 13, 1, 1, 4, 3',
  ].join('\n'));
  assert.match(await page.locator('.names-warning').textContent(), /header line differs from the dataset's cell names; the dataset's names are used: influenza, common cold/);
  await page.getByLabel('ε (privacy cost to calibrate to)').fill('0.5');
  await page.getByRole('button', { name: 'Preview' }).click();
  preview = page.locator('dl.preview');
  await preview.waitFor();
  assert.match(await preview.locator('.preview-cells').textContent(), /influenza, common cold, measles, mumps, covid-19, other/);
  assert.deepEqual(await preview.locator('table.forecasts tbody th').allTextContents(), ['0-17', '18-64', '65+']);
  await page.getByRole('button', { name: /Release \(spends ε 0\.5\)/ }).click();
  await page.getByText(/Released #1: charged ε 0\.5/).waitFor();
  let heatNamed = page.locator('svg.heat-map[data-rows="3"]');
  await heatNamed.waitFor();
  assert.deepEqual(await axisLabels(heatNamed, 'col-label'), cellNames, "the dataset's names win over the header");
  assert.deepEqual(await axisLabels(heatNamed, 'row-label'), ['0-17', '18-64', '65+']);
  // The row names were sent and stored; the header was not sent.
  assert.deepEqual(releaseBodies[releaseBodies.length - 1].row_names, ['0-17', '18-64', '65+']);
  assert.ok(!('cells' in releaseBodies[releaseBodies.length - 1]));
  const namedStored = await api('GET', `/v1/datasets/${clinicId}/releases`, ADMIN);
  assert.deepEqual(namedStored.body.cells, cellNames);
  assert.deepEqual(namedStored.body.items[0].row_names, ['0-17', '18-64', '65+']);
  await assertNoStrayText(page, "the admin's page of a dataset with cell names");
  await page.screenshot({ path: `${OUT}/allocations-page.png`, fullPage: true });
  // Reloaded, the stored release from the listing carries the same names.
  await page.reload();
  heatNamed = page.locator('svg.heat-map[data-rows="3"]');
  await heatNamed.waitFor();
  assert.deepEqual(await axisLabels(heatNamed, 'col-label'), cellNames);
  assert.deepEqual(await axisLabels(heatNamed, 'row-label'), ['0-17', '18-64', '65+']);
  await page.locator('.output').screenshot({ path: `${OUT}/named-output.png` });

  step('plan before spending: the planner shows what the API answers, and charges nothing');
  const planSection = page.locator('section.plan-section');
  await assertLabelled(page, 'the planner');
  assert.match(await planSection.locator('.plan-form > .hint').textContent(), /n must be a public figure.*never read off the private counts.*charges nothing/s);
  assert.equal(await planSection.locator('fieldset.plan-item').count(), 1);
  const firstItem = planSection.locator('fieldset.plan-item').first();
  assert.equal(await firstItem.getByLabel('d (cells)').inputValue(), '6', "d defaults to the dataset's named cells");
  // The mechanisms offered are "auto" and every one the service lists, in its order.
  assert.deepEqual(await firstItem.getByLabel('Mechanism').locator('option').evaluateAll((os) => os.map((o) => o.value)),
    ['auto', ...listing.map((m) => m.name)]);
  const ledgerBeforePlans = (await api('GET', `/v1/datasets/${clinicId}/budget`, ADMIN)).body;
  assert.ok(ledgerBeforePlans.spent > 0, 'planning on a dataset that has spent something');
  await planItem(planSection, 0, { n: 5000, goal: 'l2', value: 0.05 });
  await planItem(planSection, 1, { rows: 3, n: 50, lowerBound: true, mechanism: 'dirichlet', value: 0.1 });
  await assertLabelled(page, 'the planner with two items');
  let plan = await planAndCompare(page, planSection, ADMIN);
  assert.deepEqual(plan.request, { items: [
    { d: 6, mechanism: 'auto', n: 5000, target: { l2: 0.05, confidence: 0.95 } },
    { d: 6, rows: 3, mechanism: 'dirichlet', n_lower_bound: 50, epsilon: 0.1 },
  ] }, 'the form sends what was filled in');
  assert.equal(plan.answer.items[0].status, 'planned', 'the target is reachable under auto');
  assert.ok(Math.abs(plan.answer.items[1].epsilon - 0.1) < 1e-9, 'the ε given, on the ledger grid');
  assert.equal(plan.answer.fits, true);
  assert.equal(plan.answer.remaining, ledgerBeforePlans.remaining, "the admin's plan is checked against the dataset's remaining budget");
  // A target the mechanism asked for cannot reach (posterior's r is fixed, so more ε stops buying
  // accuracy): the item says how close it gets and what total would do, and the list does not fit.
  await planItem(planSection, 2, { n: 20, mechanism: 'posterior', goal: 'cell_sd', value: 0.01 });
  plan = await planAndCompare(page, planSection, ADMIN);
  assert.equal(plan.answer.items[2].status, 'unreachable');
  assert.equal(plan.answer.fits, false);
  const unreachable = planSection.locator('table.plan-results tbody tr[data-item="2"] .unreachable');
  const { shortfall } = plan.answer.items[2];
  assert.equal(await unreachable.textContent(), `✗ Unreachable. Even at ε ${shown(shortfall.max_epsilon)}, posterior reaches only `
    + `${forecastShown(shortfall.best)}; `
    + `a public total of ${shown(shortfall.min_n)} or more would reach the target.`);
  assert.match(await planSection.locator('dd.fits').textContent(), /No — 1 item is unreachable/);
  await assertNoStrayText(page, 'a plan with an unreachable item');
  await planSection.screenshot({ path: `${OUT}/planner.png` });
  // An invalid item: the service's 422 names the field, and the control at fault is marked.
  await planSection.getByRole('button', { name: 'Remove item 3' }).click();
  assert.equal(await planSection.locator('fieldset.plan-item').count(), 2);
  await planItem(planSection, 1, { d: 1 });
  await planSection.getByRole('button', { name: 'Plan', exact: true }).click();
  problem = planSection.locator('.problem[data-status="422"]');
  await problem.waitFor();
  assert.match(await problem.locator('.problem-title').textContent(), /Invalid request/);
  assert.match(await problem.locator('.problem-detail').textContent(), /at least 2/);
  assert.equal(await problem.locator('.problem-field').textContent(), 'Field: items[1].d');
  const badD = planSection.locator('fieldset.plan-item').nth(1).getByLabel('d (cells)');
  assert.equal(await badD.getAttribute('aria-invalid'), 'true');
  assert.ok(await badD.evaluate((el) => el === document.activeElement), 'the control at fault has the focus');
  assert.equal(await planSection.locator('table.plan-results').count(), 0);
  assert.deepEqual((await api('GET', `/v1/datasets/${clinicId}/budget`, ADMIN)).body, ledgerBeforePlans, 'planning charged nothing');
  assert.ok(Math.abs((await spend(page)).spent - ledgerBeforePlans.spent) < 1e-9, 'the spend chart did not move');

  step("the README walkthrough's table step by clicking: a labelled table, one charge, a heat map");
  await page.getByRole('link', { name: 'Register dataset' }).click();
  await page.getByLabel('Name', { exact: true }).fill('visits per diagnosis by age band');
  await page.getByLabel('ε', { exact: true }).fill('1');
  await page.getByLabel('Order λ').fill('2');
  await page.getByRole('button', { name: 'Register' }).click();
  await page.getByRole('heading', { name: 'visits per diagnosis by age band' }).waitFor();
  const tablesId = new URL(page.url()).hash.split('/').pop();
  assert.match(tablesId, /^[0-9a-f-]{36}$/);
  // No analyst token may use it yet: no allocation form, a pointer to making a token instead.
  await page.getByText('No analyst token may use this dataset yet').waitFor();
  assert.ok(await page.locator('form.allocation-form').isHidden());
  assert.equal(await page.locator('table.allocation-changes').count(), 0, 'no history without changes');
  await page.getByLabel('Counts').fill([
    'age, flu, cold, measles, mumps, covid, other',
    '0-17, 40, 12, 1, 0, 5, 2',
    '18-64, 55, 20, 1, 0, 8, 4',
    '65+, 25, 13, 1, 1, 4, 3',
  ].join('\n'));
  assert.match(await page.locator('.hint.shape').textContent(), /3 rows × 6 cells, released for one charge/);
  await page.getByLabel('ε (privacy cost to calibrate to)').fill('0.5');
  const tableLabel = 'diagnosis | by age band';
  await page.getByLabel('Label (optional)').fill(tableLabel);
  await assertLabelled(page, 'table release');
  await page.getByRole('button', { name: 'Preview' }).click();
  preview = page.locator('dl.preview');
  await preview.waitFor();
  assert.equal(await preview.getAttribute('data-admissible'), 'true');
  assert.match(await preview.textContent(), /a table of 3 rows over 6 cells, one charge for all rows/);
  assert.match(await preview.locator('.cost').textContent(), /ε 0\.5 at order λ = 2/);
  const forecastRows = preview.locator('table.forecasts tbody tr');
  assert.equal(await forecastRows.count(), 3, 'one forecast per row');
  assert.deepEqual(await forecastRows.locator('th').allTextContents(), ['0-17', '18-64', '65+']);
  for (const text of await forecastRows.allTextContents()) assert.match(text, /≤ \d.*≤ \d.*Pr\[KL >/);
  await page.getByRole('button', { name: /Release \(spends ε 0\.5\)/ }).click();
  await page.getByText(/Released #1: charged ε 0\.5/).waitFor();
  const heat = page.locator('svg.heat-map[data-rows="3"]');
  await heat.waitFor();
  assert.deepEqual(await axisLabels(heat, 'row-label'), ['0-17', '18-64', '65+'], 'row names label the heat map');
  assert.deepEqual(await axisLabels(heat, 'col-label'), ['flu', 'cold', 'measles', 'mumps', 'covid', 'other'], 'without dataset names, the header labels the cells');
  await page.locator('figcaption', { hasText: `Release #1 “${tableLabel}”: 3 distributions over 6 cells` }).waitFor();
  await page.locator('svg.spend-chart[data-points="1"]').waitFor();
  const tableRow = page.locator('table.releases tbody tr').first();
  assert.equal(await tableRow.locator('td').nth(1).textContent(), tableLabel);
  assert.match(await tableRow.locator('td').nth(2).textContent(), /dirichlet\s*table ×3/);
  // What was sent: the rows and their names (not the header), the label, a fresh key.
  const sent = releaseBodies[releaseBodies.length - 1];
  assert.deepEqual(sent, {
    table: [[40, 12, 1, 0, 5, 2], [55, 20, 1, 0, 8, 4], [25, 13, 1, 1, 4, 3]],
    row_names: ['0-17', '18-64', '65+'],
    epsilon: 0.5,
    mechanism: 'dirichlet',
    label: tableLabel,
  });
  assert.equal(new Set(releaseKeys).size, 4);
  // What the service holds: one release of three distributions, charged as one 6-cell vector.
  const stored = await api('GET', `/v1/datasets/${tablesId}/releases`, ADMIN);
  assert.equal(stored.body.items.length, 1);
  const [table] = stored.body.items;
  assert.equal(table.label, tableLabel);
  assert.deepEqual(table.row_names, ['0-17', '18-64', '65+']);
  assert.equal(table.distributions.length, 3);
  for (const row of table.distributions) {
    assert.equal(row.length, 6);
    assert.ok(Math.abs(row.reduce((a, b) => a + b, 0) - 1) < 1e-9);
  }
  const oneVector = await api('POST', `/v1/datasets/${tablesId}/releases/preview`, ADMIN, { counts: [40, 12, 1, 0, 5, 2], epsilon: 0.5 });
  assert.equal(table.cost.epsilon, oneVector.body.cost.epsilon);
  const tablesBudget = await api('GET', `/v1/datasets/${tablesId}/budget`, ADMIN);
  assert.equal(tablesBudget.body.releases, 1);
  assert.equal(tablesBudget.body.spent, table.cost.epsilon);
  await page.screenshot({ path: `${OUT}/table.png`, fullPage: true });
  await page.locator('.output').screenshot({ path: `${OUT}/table-output.png` });
  // Reloaded, the output comes from the listing: the stored row names, and the cells numbered
  // (this dataset has no cell names, and the pasted header was never sent).
  await page.reload();
  await page.locator('svg.heat-map[data-rows="3"]').waitFor();
  assert.deepEqual(await axisLabels(page.locator('svg.heat-map'), 'row-label'), ['0-17', '18-64', '65+']);
  assert.deepEqual(await axisLabels(page.locator('svg.heat-map'), 'col-label'), ['0', '1', '2', '3', '4', '5']);

  step('the datasets list sorts by remaining budget');
  await page.getByRole('link', { name: 'Datasets', exact: true }).click();
  await page.locator('table.datasets').waitFor();
  await page.getByRole('button', { name: /Remaining/ }).click();
  let names = await page.locator('table.datasets tbody th').allTextContents();
  assert.deepEqual(names, ['visits per diagnosis', 'visits per diagnosis by age band', 'clinic visits', 'survey answers'], 'ascending: least remaining first');
  assert.equal(await page.locator('th[aria-sort="ascending"]').count(), 1);
  await page.getByRole('button', { name: /Remaining/ }).click();
  names = await page.locator('table.datasets tbody th').allTextContents();
  assert.deepEqual(names, ['survey answers', 'clinic visits', 'visits per diagnosis by age band', 'visits per diagnosis']);
  assert.equal(await page.locator('table.datasets .allocation-line').count(), 0, 'the admin has no allocation of their own');
  await page.getByRole('button', { name: /Remaining/ }).click();
  await page.screenshot({ path: `${OUT}/datasets.png` });

  step('sign out; sign in as the analyst with the keyboard only');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'sign-out forgets the token');
  await page.reload();
  await page.getByRole('heading', { name: 'Sign in' }).waitFor();
  assert.equal(await page.evaluate(() => document.activeElement.type), 'password', 'the token field has the focus');
  await page.keyboard.type(analyst);
  await page.keyboard.press('Enter');
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
  assert.match(await page.locator('.role').textContent(), /Analyst/);
  await page.locator('table.datasets').waitFor();
  names = await page.locator('table.datasets tbody th').allTextContents();
  assert.deepEqual(names.sort(), ['clinic visits', 'visits per diagnosis'], 'an analyst sees only its datasets');
  // The budget column shows the analyst's own allocation where there is one.
  assert.match(await page.locator(`table.datasets tr[data-id="${clinicId}"] .allocation-line`).textContent(), /0 of your 0\.25 allocation spent/);
  assert.equal(await page.locator(`table.datasets tr[data-id="${visitsId}"] .allocation-line`).count(), 0);
  assert.equal(await page.getByRole('link', { name: 'Register dataset' }).count(), 0, 'no admin forms for an analyst');
  await page.goto(`${BASE}/console#/new-token`);
  await page.getByRole('heading', { name: 'Datasets' }).waitFor();

  step('a preview that does not fit cannot be released');
  // Keyboard only: Tab to the dataset's link and follow it with Enter.
  for (let i = 0; i < 20; i += 1) {
    await page.keyboard.press('Tab');
    if (await page.evaluate(() => document.activeElement.textContent === 'visits per diagnosis')) break;
  }
  assert.equal(await page.evaluate(() => document.activeElement.tagName), 'A', 'the dataset link is reachable by Tab');
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'visits per diagnosis' }).waitFor();
  assert.match(await page.locator('.budget-slot .budget-summary').textContent(), /No allocation of your own: your releases draw on the dataset's budget/);
  assert.match(await page.locator('.allocation-own').textContent(), /You have no allocation on this dataset/);
  preview = await previewAndRelease(page, '118, 47, 3, 1, 17, 9', 0.5);
  assert.equal(await preview.getAttribute('data-admissible'), 'false');
  assert.match(await preview.textContent(), /No — only 0\.2 remains/);
  assert.equal(await preview.locator('.allocation-after').count(), 0, 'no allocation, no allocation line');
  assert.ok(await page.getByRole('button', { name: /Release \(does not fit\)/ }).isDisabled());

  step('another client spends the budget between preview and release: 409 shown clearly');
  preview = await previewAndRelease(page, '118, 47, 3, 1, 17, 9', 0.15);
  assert.equal(await preview.getAttribute('data-admissible'), 'true');
  const meanwhile = await api('POST', `/v1/datasets/${visitsId}/releases`, ADMIN, { counts: [1, 2, 3, 4, 5, 6], epsilon: 0.1 });
  assert.equal(meanwhile.status, 201);
  await page.getByRole('button', { name: /Release \(spends/ }).click();
  const refusal = page.locator('.problem');
  await refusal.waitFor();
  assert.equal(await refusal.getAttribute('data-status'), '409');
  assert.match(await refusal.locator('.problem-title').textContent(), /Privacy budget exhausted/);
  assert.match(await refusal.locator('.problem-detail').textContent(), /exceed|remain/);
  assert.equal(await refusal.getAttribute('class'), 'problem budget-exhausted');
  assert.match(await refusal.locator('.problem-ledger').textContent(), /The dataset's budget: 0\.1 of 1 left/);
  assert.ok(await page.getByRole('button', { name: 'Release', exact: true }).isDisabled(), 'a refusal needs a new preview');
  await page.locator('svg.spend-chart[data-points="3"]').waitFor();
  await page.screenshot({ path: `${OUT}/refusal.png`, fullPage: true });
  const analystSession = await assertNoStoredToken(page, 'analyst');
  assert.ok(analystSession.includes(analyst) && !analystSession.includes(ADMIN));

  step('the analyst sees their own allocation only, and previews show it after the release');
  await page.goto(`${BASE}/console#/datasets/${clinicId}`);
  await page.getByRole('heading', { name: 'clinic visits' }).waitFor();
  const own = page.locator('section.allocations-section');
  await own.locator('.allocation-own').waitFor();
  assert.equal(await own.locator('.allocation-own').getAttribute('data-token'), analystId);
  assert.match(await own.locator('.allocation-own').textContent(), /Your allocation: ε 0\.25 at λ = 2, 0 spent, 0\.25 left/);
  const ownText = await own.textContent();
  for (const other of [tokenB, tokenC, tokenD]) assert.ok(!ownText.includes(other), `another token's allocation is shown: ${other}`);
  assert.equal(await own.locator('form, button').count(), 0, 'an analyst cannot edit allocations');
  assert.equal(await own.locator('table.allocation-changes tbody tr').count(), 2, "the analyst's own changes only");
  assert.match(await page.locator('.budget-slot .budget-summary .allocation-line').textContent(), /0 of your 0\.25 allocation spent/);
  // The analyst's plan is checked against their allocation, not the dataset's remaining budget.
  const analystPlanSection = page.locator('section.plan-section');
  await planItem(analystPlanSection, 0, { n: 200, value: 0.3 });
  const analystPlan = await planAndCompare(page, analystPlanSection, analyst);
  assert.equal(analystPlan.answer.remaining, 0.25);
  assert.equal(analystPlan.answer.fits, false);
  assert.match(await analystPlanSection.locator('dd.remaining').textContent(), /or less under your allocation/);
  assert.match(await analystPlanSection.locator('dd.fits').textContent(), /No — the total exceeds the 0\.25 that remains/);
  preview = await previewAndRelease(page, '30, 12, 5, 0, 3, 1', 0.2);
  assert.equal(await preview.getAttribute('data-admissible'), 'true');
  assert.match(await preview.locator('.allocation-after').textContent(), /Yes — 0\.05 of your 0\.25 would remain after it/);
  await page.getByRole('button', { name: /Release \(spends ε 0\.2\)/ }).click();
  await page.getByText(/Released #2: charged ε 0\.2/).waitFor();
  await analystPlanSection.getByText('A release spent budget since this plan; plan again to see what remains.').waitFor();
  assert.equal(await analystPlanSection.locator('dl.plan-totals').count(), 0, 'a plan made before a release is not left to mislead');
  const namedBars = page.locator('svg.bar-chart[data-cells="6"]');
  await namedBars.waitFor();
  assert.deepEqual(await axisLabels(namedBars), cellNames, "the dataset's cell names label the bars");
  await own.getByText(/0\.2 spent, 0\.05 left/).waitFor();
  // Over the allocation while the dataset has room: the preview says which one does not fit.
  preview = await previewAndRelease(page, '30, 12, 5, 0, 3, 1', 0.1);
  assert.equal(await preview.getAttribute('data-admissible'), 'false');
  assert.match(await preview.locator('.allocation-after').textContent(), /No — only 0\.05 of your allocation of 0\.25 remains/);
  assert.match(await preview.textContent(), /Fits the budget\s*✓ Yes — 1\.3 of 2 remains/);
  assert.ok(await page.getByRole('button', { name: /Release \(does not fit\)/ }).isDisabled());

  step('the admin lowers the allocation between preview and release: a distinct 409');
  preview = await previewAndRelease(page, '30, 12, 5, 0, 3, 1', 0.04);
  assert.equal(await preview.getAttribute('data-admissible'), 'true');
  const lowered = await api('PUT', `/v1/datasets/${clinicId}/allocations/${analystId}`, ADMIN, { epsilon: 0.22 });
  assert.equal(lowered.status, 200);
  const clinicBefore = (await api('GET', `/v1/datasets/${clinicId}/budget`, ADMIN)).body;
  await page.getByRole('button', { name: /Release \(spends/ }).click();
  const allocationRefusal = page.locator('.problem');
  await allocationRefusal.waitFor();
  assert.equal(await allocationRefusal.getAttribute('data-status'), '409');
  assert.equal(await allocationRefusal.getAttribute('data-type'), '/problems/allocation-exhausted');
  assert.equal(await allocationRefusal.getAttribute('class'), 'problem allocation-exhausted');
  assert.match(await allocationRefusal.locator('.problem-title').textContent(), /^⚠ Allocation exhausted$/);
  assert.match(await allocationRefusal.locator('.problem-detail').textContent(), /allocation/);
  assert.match(await allocationRefusal.locator('.problem-ledger').textContent(), /Your allocation: 0\.02 of 0\.22 left, while the dataset's budget still has 1\.3 of 2 left/);
  assert.ok(await page.getByRole('button', { name: 'Release', exact: true }).isDisabled(), 'a refusal needs a new preview');
  await own.getByText(/Your allocation: ε 0\.22 at λ = 2, 0\.2 spent, 0\.02 left/).waitFor();
  assert.deepEqual((await api('GET', `/v1/datasets/${clinicId}/budget`, ADMIN)).body, clinicBefore, 'the refusal charged nothing');
  await assertNoStrayText(page, "the analyst's page of a dataset with cell names");
  await page.screenshot({ path: `${OUT}/allocation-refusal.png`, fullPage: true });
  // Reloaded, the newest stored release (the analyst's vector) is drawn with the cell names.
  await page.reload();
  await page.locator('svg.bar-chart[data-cells="6"]').waitFor();
  assert.deepEqual(await axisLabels(page.locator('svg.bar-chart')), cellNames);

  step('a narrow window: no page-wide horizontal scrolling');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${BASE}/console#/`);
  await page.locator('table.datasets').waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page scrolls sideways by ${overflow}px at 390px`);
  await page.screenshot({ path: `${OUT}/datasets-narrow.png`, fullPage: true });
  await page.goto(`${BASE}/console#/datasets/${visitsId}`);
  await page.locator('svg.spend-chart').waitFor();
  const overflowDataset = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflowDataset <= 0, `the dataset page scrolls sideways by ${overflowDataset}px at 390px`);
  step('sign in as the admin again: a table and its per-row forecasts fit a narrow window');
  await page.getByRole('button', { name: 'Sign out' }).click();
  // Signing in renders the datasets list; navigating on while that list is still loading must
  // leave the newer view on screen (CI once saw the late list overwrite the dataset page). The
  // list is held back for 1.5 s so that it always answers last.
  const isList = (url) => new URL(url).pathname === '/v1/datasets';
  let heldBack = 0;
  await page.route(isList, async (r) => {
    heldBack += 1;
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await r.continue();
  });
  await signIn(page, ADMIN);
  await page.goto(`${BASE}/console#/datasets/${tablesId}`);
  await page.locator('svg.heat-map[data-rows="3"]').waitFor();
  await page.waitForTimeout(2500);
  assert.ok(heldBack >= 1, 'the datasets list was requested and held back');
  assert.ok(await page.locator('svg.heat-map[data-rows="3"]').isVisible(), 'the dataset page stays after the late list');
  await page.unroute(isList);
  await page.getByLabel('Counts').fill('40 12 1 0 5 2\n55 20 1 0 8 4\n25 13 1 1 4 3');
  await page.getByLabel('ε (privacy cost to calibrate to)').fill('0.1');
  await page.getByRole('button', { name: 'Preview' }).click();
  await page.locator('table.forecasts').waitFor();
  const overflowTable = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflowTable <= 0, `the table's dataset page scrolls sideways by ${overflowTable}px at 390px`);
  await page.screenshot({ path: `${OUT}/table-narrow.png`, fullPage: true });
  await page.goto(`${BASE}/console#/datasets/${clinicId}`);
  await page.locator('table.allocations').waitFor();
  const overflowAllocations = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflowAllocations <= 0, `the allocations' dataset page scrolls sideways by ${overflowAllocations}px at 390px`);
  await page.locator('section.allocations-section').screenshot({ path: `${OUT}/allocations-narrow.png` });
  // What the admin sees once the analyst spent most of a lowered allocation.
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.reload();
  await page.locator('table.allocations').waitFor();
  assert.deepEqual(await page.locator(`table.allocations tr[data-token="${analystId}"] td.num`).allTextContents(), ['0.22', '0.2', '0.02']);
  assert.equal(await page.locator('table.allocation-changes tbody tr').count(), 8);
  await page.locator('section.allocations-section').screenshot({ path: `${OUT}/allocations.png` });

  step('every listed mechanism in both forms, each with its own fields; exponential, explicit and a smoothed gaussian released through the form; plans by fields and by KL');
  const everyId = (await api('POST', '/v1/datasets', ADMIN, { name: 'every mechanism', budget: { epsilon: 64, order: 2 } })).body.id;
  await page.goto(`${BASE}/console#/datasets/${everyId}`);
  await page.getByRole('heading', { name: 'every mechanism' }).waitFor();
  const releaseFormEl = page.locator('form.release-form');
  const releaseMechanism = releaseFormEl.getByLabel('Mechanism', { exact: true });
  assert.deepEqual(await releaseMechanism.locator('option').evaluateAll((os) => os.map((o) => o.value)), listing.map((m) => m.name),
    'the release form offers every listed mechanism, in the listing order');
  assert.equal(await releaseMechanism.inputValue(), listing.find((m) => m.default).name, 'the default mechanism is selected');
  /** The visible mechanism-field controls of a form part: name, required, placeholder, hint. */
  const shownFields = (where) => where.locator('.mechanism-fields:not([hidden]) [data-field]').evaluateAll((controls) => controls.map((c) => ({
    name: c.dataset.field,
    required: c.required,
    placeholder: c.placeholder,
    hint: document.getElementById(c.getAttribute('aria-describedby'))?.textContent ?? '',
    number: c.type === 'number',
  })));
  const expectedFields = (m, planning = false) => m.fields
    .filter((f) => !planning || f.plan)
    .map((f) => ({ name: f.name, required: f.required, number: f.type === 'number' }));
  for (const m of listing) {
    await releaseMechanism.selectOption(m.name);
    const fields = await shownFields(releaseFormEl);
    assert.deepEqual(fields.map(({ name, required, number }) => ({ name, required, number })), expectedFields(m), `${m.name}'s fields in the release form`);
    for (const [i, f] of m.fields.entries()) {
      assert.ok(fields[i].hint.startsWith(f.description), `${m.name}.${f.name}: its description is the hint`);
      if (f.default !== undefined) assert.match(fields[i].placeholder, /^default /, `${m.name}.${f.name}: its default is the placeholder`);
    }
    const epsilonLabelShown = await releaseFormEl.locator('label', { hasText: /^ε/ }).textContent();
    assert.match(epsilonLabelShown, { target: /to calibrate to\)$/, target_or_cap: new RegExp(`a cap when ${m.noise_field} is given`), cap: /^ε cap \(optional/, pure: /pure ε-DP/ }[m.epsilon], `${m.name}: ε read as ${m.epsilon}`);
    assert.equal(await releaseFormEl.getByLabel('Calibration order (optional)').isVisible(), m.order, `${m.name}: order ${m.order ? 'offered' : 'not offered'}`);
    assert.match(await releaseFormEl.locator('.mechanism-about').textContent(), new RegExp(`^About ${m.name}`));
    await assertLabelled(page, `the release form with ${m.name}`);
  }

  const planFormEl = page.locator('section.plan-section');
  const planItemEl = planFormEl.locator('fieldset.plan-item').first();
  const planMechanism = planItemEl.getByLabel('Mechanism', { exact: true });
  assert.deepEqual(await planMechanism.locator('option').evaluateAll((os) => os.map((o) => o.value)), ['auto', ...listing.map((m) => m.name)]);
  const goalsShown = () => planItemEl.getByLabel('Plan by').locator('option').evaluateAll((os) => os.map((o) => o.value));
  const autoTargets = [...new Set(listing.filter((m) => m.auto).flatMap((m) => m.targets))];
  assert.deepEqual(await goalsShown(), ['epsilon', ...autoTargets], 'auto is planned by ε or any target a mechanism it weighs answers');
  assert.deepEqual(await shownFields(planItemEl), [], 'auto takes no one mechanism\'s fields');
  for (const m of listing) {
    await planMechanism.selectOption(m.name);
    assert.deepEqual((await shownFields(planItemEl)).map(({ name, required, number }) => ({ name, required, number })), expectedFields(m, true), `${m.name}'s fields in the plan form (those a plan item takes)`);
    const given = m.epsilon === 'cap' || m.epsilon === 'target_or_cap' ? ['given'] : [];
    assert.deepEqual(await goalsShown(), ['epsilon', ...m.targets, ...given], `${m.name}: planned by ε, its targets${given.length ? ' or its fields' : ''}`);
    await assertLabelled(page, `the plan form with ${m.name}`);
  }

  // exponential through the form: a Beta prior of two numbers, a pure ε, the selection's forecast.
  const exponential = listed('exponential');
  assert.ok(exponential && !exponential.tables, 'the listing has the exponential mechanism, vectors only');
  await releaseMechanism.selectOption('exponential');
  await page.getByLabel('Counts').fill('60 40\n30 70');
  assert.match(await page.locator('.hint.shape').textContent(), /exponential releases one vector, not a table/);
  const sentBeforeTable = releaseBodies.length;
  await releaseFormEl.getByRole('button', { name: 'Preview' }).click();
  problem = releaseFormEl.locator('.problem');
  await problem.waitFor();
  assert.match(await problem.locator('.problem-title').textContent(), /One vector only/);
  assert.equal(releaseBodies.length, sentBeforeTable, 'a table for a vector-only mechanism is caught before sending');
  await page.getByLabel('Counts').fill('60, 40');
  await releaseFormEl.getByLabel('prior', { exact: true }).fill('2, 3');
  await releaseFormEl.getByLabel(/^ε/).fill('0.5');
  await releaseFormEl.locator('.mechanism-about summary').click();
  await releaseFormEl.getByRole('button', { name: 'Preview' }).click();
  preview = page.locator('dl.preview');
  await preview.waitFor();
  await page.locator('section', { has: releaseFormEl }).screenshot({ path: `${OUT}/mechanisms.png` });
  assert.match(await preview.textContent(), /Forecast Hellinger distance\s*≤ \d/);
  assert.match(await preview.textContent(), /exponential: .*prior = \[2, 3\]/);
  await page.getByRole('button', { name: /Release \(spends/ }).click();
  await page.getByText(/Released #1/).waitFor();
  assert.deepEqual(releaseBodies[releaseBodies.length - 1], { counts: [60, 40], mechanism: 'exponential', epsilon: 0.5, prior: [2, 3] });
  let storedEvery = (await api('GET', `/v1/datasets/${everyId}/releases`, ADMIN)).body.items;
  assert.equal(storedEvery[0].mechanism.kind, 'exponential');
  assert.deepEqual(storedEvery[0].mechanism.prior, [2, 3]);

  // explicit through the form: r and α given, ε only an optional cap; a field that is not a
  // number is caught and marked before sending, a required one left out is the service's 422.
  const explicit = listed('explicit');
  assert.ok(explicit && explicit.epsilon === 'cap', 'the listing has the explicit mechanism, its ε a cap');
  await releaseMechanism.selectOption('explicit');
  await page.getByLabel('Counts').fill('60, 40, 5');
  // No cap: the exponential release's ε stays in the field until cleared (r and α fix the cost).
  await releaseFormEl.getByLabel(/^ε cap/).fill('');
  await releaseFormEl.getByLabel('r (required)', { exact: true }).fill('0.5');
  await releaseFormEl.getByLabel('alpha (required)', { exact: true }).fill('1, x, 1');
  const sentBeforeBad = releaseBodies.length;
  await releaseFormEl.getByRole('button', { name: 'Preview' }).click();
  problem = releaseFormEl.locator('.problem');
  await problem.waitFor();
  assert.match(await problem.locator('.problem-detail').textContent(), /^alpha: value 2 is not a number\.$/);
  assert.equal(await problem.locator('.problem-field').textContent(), 'Field: alpha');
  assert.equal(await releaseFormEl.getByLabel('alpha (required)', { exact: true }).getAttribute('aria-invalid'), 'true');
  await releaseFormEl.getByLabel('alpha (required)', { exact: true }).fill('');
  await releaseFormEl.getByRole('button', { name: 'Preview' }).click();
  problem = releaseFormEl.locator('.problem[data-status="422"]');
  await problem.waitFor();
  assert.equal(await problem.locator('.problem-field').textContent(), 'Field: alpha');
  assert.equal(await releaseFormEl.getByLabel('alpha (required)', { exact: true }).getAttribute('aria-invalid'), 'true');
  assert.equal(releaseBodies.length, sentBeforeBad, 'previews only: nothing released');
  await releaseFormEl.getByLabel('alpha (required)', { exact: true }).fill('1');
  await releaseFormEl.getByRole('button', { name: 'Preview' }).click();
  preview = page.locator('dl.preview');
  await preview.waitFor();
  assert.match(await preview.textContent(), /explicit: .*r = 0\.5/);
  await page.getByRole('button', { name: /Release \(spends/ }).click();
  await page.getByText(/Released #2/).waitFor();
  assert.deepEqual(releaseBodies[releaseBodies.length - 1], { counts: [60, 40, 5], mechanism: 'explicit', r: 0.5, alpha: 1 });
  storedEvery = (await api('GET', `/v1/datasets/${everyId}/releases`, ADMIN)).body.items;
  assert.deepEqual([storedEvery[0].mechanism.kind, storedEvery[0].mechanism.r, storedEvery[0].mechanism.alpha], ['explicit', 0.5, 1]);
  // Switching away and back keeps what was typed in a mechanism's fields.
  await releaseMechanism.selectOption('dirichlet');
  await releaseMechanism.selectOption('explicit');
  assert.equal(await releaseFormEl.getByLabel('r (required)', { exact: true }).inputValue(), '0.5');
  // gaussian with a smoothing pseudo-count, a field the form knows only from the listing.
  assert.ok(listed('gaussian')?.fields.some((f) => f.name === 'smoothing'), 'gaussian lists smoothing');
  await releaseMechanism.selectOption('gaussian');
  await releaseFormEl.getByLabel(/^ε/).fill('0.5');
  await releaseFormEl.getByLabel('smoothing', { exact: true }).fill('0.5');
  await releaseFormEl.getByRole('button', { name: 'Preview' }).click();
  await page.locator('dl.preview').waitFor();
  await page.getByRole('button', { name: /Release \(spends/ }).click();
  await page.getByText(/Released #3/).waitFor();
  assert.deepEqual(releaseBodies[releaseBodies.length - 1], { counts: [60, 40, 5], mechanism: 'gaussian', epsilon: 0.5, smoothing: 0.5 });
  storedEvery = (await api('GET', `/v1/datasets/${everyId}/releases`, ADMIN)).body.items;
  assert.deepEqual([storedEvery[0].mechanism.kind, storedEvery[0].mechanism.smoothing], ['gaussian', 0.5]);
  assert.ok(storedEvery[0].distribution.every((p) => p > 0), 'a smoothed release has no zero cell');

  // The planner, by the listing: explicit planned by its fields alone; auto and gaussian planned
  // by a KL target (gaussian's smoothing pseudo-count left to the planner).
  await planItem(planFormEl, 0, { d: 3, n: 105, mechanism: 'explicit', goal: 'given' });
  await planItemEl.getByLabel('r (required)', { exact: true }).fill('0.5');
  await planItemEl.getByLabel('alpha (required)', { exact: true }).fill('1');
  assert.ok(autoTargets.includes('kl'), 'a mechanism auto weighs answers a KL target');
  await planItem(planFormEl, 1, { d: 6, n: 5000, goal: 'kl', value: 0.05, confidence: 0.9 });
  await planItem(planFormEl, 2, { d: 6, n: 5000, mechanism: 'gaussian', goal: 'kl', value: 0.05 });
  const everyPlan = await planAndCompare(page, planFormEl, ADMIN);
  assert.deepEqual(everyPlan.request.items[0], { d: 3, n: 105, mechanism: 'explicit', r: 0.5, alpha: 1 });
  assert.equal(everyPlan.answer.items[0].status, 'planned');
  assert.equal(everyPlan.answer.items[0].cost, storedEvery[1].cost.epsilon, 'planned at what its release was charged');
  assert.deepEqual(everyPlan.request.items[1], { d: 6, mechanism: 'auto', n: 5000, target: { kl: 0.05, confidence: 0.9 } });
  assert.deepEqual(everyPlan.request.items[2], { d: 6, mechanism: 'gaussian', n: 5000, target: { kl: 0.05, confidence: 0.95 } });
  for (const i of [1, 2]) {
    const planned = everyPlan.answer.items[i];
    assert.equal(planned.status, 'planned', `item ${i} reaches its KL target`);
    assert.ok(planned.forecast.kl <= 0.05, `item ${i}'s KL forecast meets the target`);
    assert.match(await planFormEl.locator(`table.plan-results tbody tr[data-item="${i}"] td.forecast`).textContent(), /, KL ≤ /);
  }
  // The pseudo-count the planner chose for gaussian is among the parameters shown.
  const smoothing = everyPlan.answer.items[2].parameters.smoothing;
  assert.equal(typeof smoothing, 'number', 'a KL plan of gaussian smooths its output');
  assert.match(await planFormEl.locator('table.plan-results tbody tr[data-item="2"] td.params').textContent(), new RegExp(`smoothing = ${shown(smoothing).replace('.', '\\.')}`));
  await assertNoStrayText(page, 'the dataset page after releases and a plan by every mechanism');
  await planFormEl.screenshot({ path: `${OUT}/planner-mechanisms.png` });

  step('populations: create a tree by the forms, place datasets, see each node, the binding one and a dataset\'s budget path');
  const wardA = (await api('POST', '/v1/datasets', ADMIN, { name: 'ward A', budget: { epsilon: 1, order: 2 } })).body.id;
  const wardB = (await api('POST', '/v1/datasets', ADMIN, { name: 'ward B', budget: { epsilon: 1, order: 2 } })).body.id;
  // Spend before placing: an external charge on ward A (exactly 0.5), a release on ward B.
  const external = await api('POST', `/v1/datasets/${wardA}/charges`, ADMIN, { mechanism: 'rdp', epsilon: 0.5, label: 'model trained elsewhere' });
  assert.equal(external.status, 201, JSON.stringify(external.body));
  assert.equal(external.body.kind, 'external');
  const wardRelease = await api('POST', `/v1/datasets/${wardB}/releases`, ADMIN, { counts: [10, 4, 1, 0], epsilon: 0.25 });
  assert.equal(wardRelease.status, 201, JSON.stringify(wardRelease.body));
  await page.getByRole('link', { name: 'Populations' }).click();
  await page.getByRole('heading', { name: 'Populations', exact: true }).waitFor();
  assert.match(await page.locator('main').textContent(), /No populations yet/);
  await assertLabelled(page, 'populations');
  const createPopulation = async ({ name, epsilon, parent, children }) => {
    await page.getByLabel('Name', { exact: true }).fill(name);
    await page.getByLabel('Budget ε (Rényi DP)').fill(String(epsilon));
    if (parent) await page.getByLabel('Parent population').selectOption(parent);
    await page.getByLabel('Children').selectOption(children);
    await page.getByRole('button', { name: 'Create population' }).click();
    const node = page.locator(`.population-node[data-name="${name}"]`);
    await node.waitFor();
    return node.getAttribute('data-id');
  };
  const rootId = await createPopulation({ name: 'hospital patients', epsilon: 1, children: 'shared' });
  assert.match(rootId, /^[0-9a-f-]{36}$/);
  const wardsId = await createPopulation({ name: 'wards', epsilon: 0.75, parent: rootId, children: 'disjoint' });
  const tinyId = await createPopulation({ name: 'tiny', epsilon: 0.125, children: 'shared' });
  const wards = (await api('GET', `/v1/populations/${wardsId}`, ADMIN)).body;
  assert.deepEqual([wards.parent, wards.children, wards.budget.order], [rootId, 'disjoint', 2]);
  // The tree nests wards under the root.
  assert.equal(await page.locator(`.population-node[data-id="${rootId}"] .population-node[data-id="${wardsId}"]`).count(), 1);

  const place = async (dataset, population) => {
    await page.getByLabel('Dataset', { exact: true }).selectOption(dataset);
    await page.getByLabel('Population', { exact: true }).selectOption(population);
    await page.getByRole('button', { name: 'Place dataset' }).click();
  };
  // Ward A has spent 0.5: more than tiny's whole budget, so placing it there is refused.
  await place(wardA, tinyId);
  const refusedPlacement = page.locator('.problem');
  await refusedPlacement.waitFor();
  assert.equal(await refusedPlacement.getAttribute('data-status'), '409');
  assert.equal(await refusedPlacement.getAttribute('data-type'), '/problems/population-budget-exhausted');
  assert.match(await refusedPlacement.textContent(), /0\.125 left|0\.125 of 0\.125|of 0\.125/);
  await place(wardA, wardsId);
  await page.locator(`.population-node[data-id="${wardsId}"] .tree-dataset[data-id="${wardA}"]`).waitFor();
  await place(wardB, wardsId);
  await page.locator(`.population-node[data-id="${wardsId}"] .tree-dataset[data-id="${wardB}"]`).waitFor();
  // Disjoint wards: the larger child's 0.5, not the sum; the root is charged what the wards were.
  const figures = async (id) => page.locator(`.population-node[data-id="${id}"] > .node-card .node-figures`).textContent();
  assert.match(await figures(wardsId), /^0\.5 of 0\.75 spent at λ = 2/);
  assert.match(await figures(rootId), /^0\.5 of 1 spent at λ = 2/);
  assert.match(await figures(tinyId), /^0 of 0\.125 spent/);
  // The wards have the least left on both wards' paths: they bind, and say so in words.
  const wardsNode = page.locator(`.population-node[data-id="${wardsId}"]`);
  assert.match(await wardsNode.getAttribute('class'), /\bbinding\b/);
  assert.match(await page.locator(`.population-node[data-id="${wardsId}"] > .node-card .binding-badge`).textContent(), /binding for 2 datasets/);
  assert.doesNotMatch(await page.locator(`.population-node[data-id="${rootId}"]`).getAttribute('class'), /\bbinding\b/);
  // Each node's spend over time, rebuilt from its datasets' releases and charges.
  await page.locator(`.population-node[data-id="${wardsId}"] > .node-card summary`).click();
  const wardsChart = page.locator(`.population-node[data-id="${wardsId}"] > .node-card svg.spend-chart`);
  await wardsChart.waitFor();
  // 0.5 as charged: rounded up on the ledger's 2⁻⁴⁰ grid.
  assert.ok(Math.abs(Number(await wardsChart.getAttribute('data-spent')) - 0.5) < 1e-9);
  assert.ok(Number(await wardsChart.getAttribute('data-points')) >= 1);
  await page.locator(`.population-node[data-id="${rootId}"] > .node-card summary`).click();
  await assertLabelled(page, 'populations with a tree');
  await assertNoStrayText(page, 'populations');
  await page.screenshot({ path: `${OUT}/populations.png`, fullPage: true });

  // The dataset page shows its budget path, the binding node marked, and the external charge.
  await page.locator(`.tree-dataset[data-id="${wardA}"] a`).click();
  await page.getByRole('heading', { name: 'ward A' }).waitFor();
  const pathNodes = page.locator('section.path-section li.path-node');
  await pathNodes.first().waitFor();
  assert.deepEqual(await pathNodes.evaluateAll((nodes) => nodes.map((n) => [n.dataset.id, n.dataset.binding])),
    [[wardA, 'false'], [wardsId, 'true'], [rootId, 'false']]);
  const externalRow = page.locator('table.releases tr[data-kind="external"]');
  assert.match(await externalRow.textContent(), /model trained elsewhere.*rdp.*external charge/s);
  await assertNoStrayText(page, 'a dataset in a population');
  await page.locator('section.path-section').screenshot({ path: `${OUT}/budget-path.png` });

  step('a dataset split into blocks by day: a release names its days, the strip shows each day');
  await page.getByRole('link', { name: 'Register dataset' }).click();
  await page.getByLabel('Name', { exact: true }).fill('daily visits');
  await page.getByLabel('ε', { exact: true }).fill('1');
  await page.getByLabel('Order λ').fill('2');
  await page.getByLabel('Split into blocks (optional)').selectOption('day');
  await assertLabelled(page, 'register with blocks');
  await page.getByRole('button', { name: 'Register' }).click();
  await page.getByRole('heading', { name: 'daily visits' }).waitFor();
  const dailyId = new URL(page.url()).hash.split('/').pop();
  assert.deepEqual((await api('GET', `/v1/datasets/${dailyId}`, ADMIN)).body.blocks, { period: 'day' });
  // Without blocks the form refuses before sending; with a week of days it releases.
  await page.getByLabel('Counts').fill('120, 45, 3, 0, 17, 9');
  await page.getByLabel('ε (privacy cost to calibrate to)').fill('0.4');
  await page.getByRole('button', { name: 'Preview' }).click();
  await page.locator('.problem-title', { hasText: 'Blocks are required' }).waitFor();
  await page.getByLabel('First block read (day)').fill('2026-12-01');
  await page.getByLabel('Last block read (optional)').fill('2026-12-07');
  await page.getByRole('button', { name: 'Preview' }).click();
  await page.locator('dl.preview').waitFor();
  await page.getByRole('button', { name: /Release \(spends ε 0\.4\)/ }).click();
  await page.getByText(/Released #1/).waitFor();
  const strip = page.locator('svg.block-strip');
  await strip.waitFor();
  const bars = await strip.locator('g.block-bar').evaluateAll((gs) => gs.map((g) => [g.dataset.key, Number(g.dataset.spent)]));
  const charged = bars.filter(([, spent]) => spent > 0).map(([key]) => key);
  assert.deepEqual(charged, ['2026-12-01', '2026-12-02', '2026-12-03', '2026-12-04', '2026-12-05', '2026-12-06', '2026-12-07']);
  assert.ok(bars.every(([, spent]) => spent === 0 || Math.abs(spent - 0.4) < 1e-9), JSON.stringify(bars));
  assert.match(await page.locator('svg.block-strip .total-label').textContent(), /cap 1 per block/);
  const released = (await api('GET', `/v1/datasets/${dailyId}/releases`, ADMIN)).body.items[0];
  assert.deepEqual(released.blocks, { from: '2026-12-01', to: '2026-12-07' });
  await assertLabelled(page, 'a dataset with blocks');
  await assertNoStrayText(page, 'a dataset with blocks');
  await page.screenshot({ path: `${OUT}/blocks.png`, fullPage: true });

  step('every console response carried the security headers');
  assert.ok(consoleResponses.length >= 6, `only ${consoleResponses.length} console responses seen`);
  for (const response of consoleResponses) {
    const headers = await response.allHeaders();
    const where = new URL(response.url()).pathname;
    const csp = headers['content-security-policy'] || '';
    assert.match(csp, /default-src 'self'/, `CSP on ${where}`);
    assert.match(csp, /frame-ancestors 'none'/, `frame-ancestors on ${where}`);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/, `a loose CSP on ${where}`);
    assert.equal(headers['x-content-type-options'], 'nosniff', where);
    assert.equal(headers['referrer-policy'], 'no-referrer', where);
  }
  assert.deepEqual(problems, []);
  await context.close();
  console.log(`console test: all steps passed; screenshots in ${OUT}`);
} catch (error) {
  if (problems.length) console.error('also seen:', problems);
  throw error;
} finally {
  await browser.close();
}
