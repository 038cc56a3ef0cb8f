// The one way the console talks to the service: the public API, same origin, with the bearer
// token in the Authorization header only. The token lives in this tab's sessionStorage (gone
// when the tab closes); never in localStorage, a cookie or a URL.

const SESSION_KEY = 'dirichlet-release.console.session';

/** A problem+json error (RFC 9457) or a stand-in for a failure that produced none. */
export class Problem extends Error {
  constructor(status, body) {
    const title = (body && typeof body.title === 'string' && body.title) || 'Request failed';
    super(title);
    this.status = status;
    this.title = title;
    this.detail = (body && typeof body.detail === 'string') ? body.detail : '';
    this.type = (body && typeof body.type === 'string') ? body.type : '';
    this.body = body || {};
  }
}

export function session() {
  try {
    const raw = sessionStorage.getItem(SESSION_KEY);
    return raw ? JSON.parse(raw) : null;
  } catch {
    return null;
  }
}

export function saveSession(value) {
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(value));
}

export function clearSession() {
  sessionStorage.removeItem(SESSION_KEY);
}

/**
 * `method path` with an optional JSON body; resolves to the parsed JSON, throws a Problem.
 * `token` overrides the session's (used by sign-in before the session exists).
 */
export async function call(method, path, { body, token, idempotencyKey } = {}) {
  const headers = { Accept: 'application/json, application/problem+json' };
  const bearer = token ?? session()?.token;
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (idempotencyKey) headers['Idempotency-Key'] = idempotencyKey;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
  } catch {
    throw new Problem(0, {
      title: 'Service unreachable',
      detail: 'The request did not reach the service (network error). Nothing was released; retrying is safe.',
    });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    throw new Problem(response.status, data && typeof data === 'object' ? data : {
      title: response.statusText || `HTTP ${response.status}`,
      detail: `The service answered HTTP ${response.status} without a problem document.`,
    });
  }
  return data;
}

/**
 * Every release of a dataset, oldest first, for the spend chart (at most `cap`): summaries only
 * (`fields=summary`: who, when, cost, label), since outputs can be megabytes each.
 */
export async function allReleases(datasetId, cap = 20000) {
  const items = [];
  let before = null;
  for (;;) {
    const query = new URLSearchParams({ limit: '1000', fields: 'summary' });
    if (before !== null) query.set('before', String(before));
    const page = await call('GET', `/v1/datasets/${encodeURIComponent(datasetId)}/releases?${query}`);
    items.push(...page.items);
    before = page.next_before ?? null;
    if (before === null || items.length >= cap) break;
  }
  items.sort((a, b) => a.seq - b.seq);
  return { items, complete: before === null };
}

let listing = null;

/**
 * The mechanisms the service runs, with their fields and what each supports
 * (`GET /v1/mechanisms`), read once per page load: the forms are built from it, never from a
 * copy kept here. A failed read is not kept, so the next page tries again.
 */
export function mechanisms() {
  if (!listing) {
    listing = call('GET', '/v1/mechanisms').then((answer) => answer.mechanisms, (error) => {
      listing = null;
      throw error;
    });
  }
  return listing;
}
