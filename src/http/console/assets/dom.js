// DOM building that never parses markup: every string becomes a text node, so a dataset name or a
// problem detail can never turn into markup (the CSP forbids inline script as a second line).

const SVG_NS = 'http://www.w3.org/2000/svg';

function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function apply(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === 'class') {
      el.setAttribute('class', Array.isArray(value) ? value.filter(Boolean).join(' ') : value);
    } else if (key === 'value' && 'value' in el) {
      el.value = value;
    } else if (value === true) {
      el.setAttribute(key, '');
    } else {
      el.setAttribute(key, String(value));
    }
  }
}

/** An HTML element: h('p', {class: 'x'}, 'text', child, [more]). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

/** An SVG element, same calling convention. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  apply(el, attrs);
  append(el, children);
  return el;
}

/** A number as people read it: up to 4 significant digits, no exponent for ordinary sizes. */
export function num(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return '—';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a < 1e-4 || a >= 1e7) return x.toExponential(2).replace('e', '×10^').replace('+', '');
  return Number(x.toPrecision(digits)).toLocaleString('en', { maximumFractionDigits: 12 });
}

export function percent(part, whole) {
  if (!(whole > 0)) return '—';
  return `${Number(((100 * part) / whole).toPrecision(3))}%`;
}

/** A timestamp in the reader's zone, minutes precision. */
export function when(iso) {
  const d = new Date(iso);
  return d.toLocaleString('en-GB', {
    year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
  });
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

let uid = 0;
/** A fresh id for label/aria wiring. */
export function id(prefix) {
  uid += 1;
  return `${prefix}-${uid}`;
}
