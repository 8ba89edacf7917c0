// The demo page's script (plain JavaScript, no library). The endpoints, methods and parameter
// forms come from the service itself: /methods lists each method with its endpoint and the
// parameters it takes; upload endpoints that have no methods (/convert) come from
// /openapi.json. A request is a multipart form with the image and a params JSON object; the
// answer is the image, with its stage times in Server-Timing and its PSNR in X-PSNR.
'use strict';

const $ = (id) => document.getElementById(id);
const endpoints = new Map(); // path -> [{name, description, params}] (name null: no methods)
let file = null;
let urls = []; // object URLs to revoke when replaced

async function getJSON(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}

// An OpenAPI query parameter in the shape /methods gives.
function fromOpenAPI(p) {
  const s = p.schema || {};
  return {
    name: p.name, type: s.type || 'string', min: s.minimum, max: s.maximum, choices: s.enum,
    default: s.default === undefined ? undefined : String(s.default),
    required: Boolean(p.required || p['x-required']), description: p.description || '',
  };
}

async function load() {
  const [m, doc] = await Promise.all([getJSON('/methods'), getJSON('/openapi.json')]);
  $('backend').textContent = m.backend;
  for (const meth of m.methods) {
    if (!endpoints.has(meth.endpoint)) endpoints.set(meth.endpoint, []);
    endpoints.get(meth.endpoint).push(meth);
  }
  for (const [path, item] of Object.entries(doc.paths)) {
    if (!item.post || !item.post.requestBody || endpoints.has(path)) continue;
    const params = (item.post.parameters || []).map(fromOpenAPI);
    endpoints.set(path, [{ name: null, description: item.post.summary, params }]);
  }
  const sel = $('endpoint');
  for (const path of endpoints.keys()) sel.add(new Option(path, path));
  showMethods();
}

function showMethods() {
  const list = endpoints.get($('endpoint').value) || [];
  const sel = $('method');
  sel.replaceChildren(...list.filter((m) => m.name).map((m) => new Option(m.name, m.name)));
  if (list.some((m) => m.name === 'auto')) sel.value = 'auto';
  $('method-label').hidden = sel.options.length === 0;
  $('compare').disabled = !endpoints.has('/blur');
  showParams();
}

function currentMethod() {
  const list = endpoints.get($('endpoint').value) || [];
  return list.find((m) => m.name === $('method').value) || list[0];
}

// One input per parameter: a select for choices and booleans, a number box with its range.
function paramInput(p) {
  let el;
  if (p.choices || p.type === 'boolean') {
    el = document.createElement('select');
    for (const c of p.choices || ['true', 'false']) el.add(new Option(c, c));
  } else {
    el = document.createElement('input');
    el.type = p.type === 'number' || p.type === 'integer' ? 'number' : 'text';
    if (p.min !== undefined) el.min = p.min;
    if (p.max !== undefined) el.max = p.max;
    if (el.type === 'number') el.step = p.type === 'integer' ? '1' : 'any';
  }
  el.name = p.name;
  el.id = `param-${p.name}`;
  el.dataset.type = p.type;
  if (p.default !== undefined) el.value = p.default;
  el.required = p.required;
  return el;
}

function showParams() {
  const m = currentMethod();
  $('method-desc').textContent = m ? `${m.description}${m.accuracy ? ` · accuracy ${m.accuracy}` : ''}` : '';
  const box = $('params');
  box.replaceChildren();
  for (const p of m ? m.params : []) {
    if (m.name && p.name === 'method') continue; // the method select sets it
    const label = document.createElement('label');
    label.title = p.description;
    const range = p.min !== undefined ? ` (${p.min}–${p.max})` : '';
    label.append(`${p.name}${p.required ? ' *' : ''}${range} `, paramInput(p));
    box.append(label);
  }
}

// The form's parameters as a JSON object: numbers as numbers, empty boxes left out.
function formParams() {
  const out = {};
  if (currentMethod() && currentMethod().name) out.method = $('method').value;
  for (const el of $('params').querySelectorAll('input, select')) {
    if (el.value === '') continue;
    const t = el.dataset.type;
    out[el.name] = t === 'number' || t === 'integer' ? Number(el.value) : t === 'boolean' ? el.value === 'true' : el.value;
  }
  return out;
}

// 'queue;dur=0.02, decode;desc="nvjpeg-hw";dur=8.8' -> [['queue', 0.02, ''], ['decode', 8.8, 'nvjpeg-hw']]
function parseTiming(header) {
  return (header || '').split(',').map((s) => s.trim().match(/^([\w-]+)(?:;desc="([^"]*)")?;dur=([\d.]+)$/))
    .filter(Boolean).map((m) => [m[1], Number(m[3]), m[2] || '']);
}

// POSTs the image with params to path; returns {blob, timing, psnr, method, backend}, or throws
// the server's error message.
async function send(path, params) {
  const fd = new FormData();
  fd.append('image', file, file.name);
  fd.append('params', JSON.stringify(params));
  const r = await fetch(path, { method: 'POST', body: fd });
  if (!r.ok) {
    let msg = `HTTP ${r.status}`;
    try { msg = (await r.json()).error.message; } catch (e) { /* not JSON: keep the status */ }
    throw new Error(msg);
  }
  return {
    blob: await r.blob(), timing: parseTiming(r.headers.get('Server-Timing')),
    psnr: r.headers.get('X-PSNR'), method: r.headers.get('X-Method'),
    backend: r.headers.get('X-Backend'),
  };
}

function objectURL(blob) {
  const u = URL.createObjectURL(blob);
  urls.push(u);
  return u;
}

function showError(e) {
  $('error').textContent = e ? e.message || String(e) : '';
  $('error').hidden = !e;
}

async function busy(fn) {
  showError(null);
  if (!file) return showError(new Error('Choose an image first.'));
  for (const b of document.querySelectorAll('button')) b.disabled = true;
  $('busy').hidden = false;
  try { await fn(); } catch (e) { showError(e); }
  for (const b of document.querySelectorAll('button')) b.disabled = false;
  $('compare').disabled = !endpoints.has('/blur');
  $('busy').hidden = true;
}

async function run() {
  const path = $('endpoint').value;
  const res = await send(path, formParams());
  for (const u of urls) URL.revokeObjectURL(u);
  urls = [];
  $('original').src = objectURL(file);
  $('result').src = objectURL(res.blob);
  $('result-caption').textContent = `${path} result`;
  $('psnr').textContent = res.psnr || '–';
  $('used-method').textContent = res.method || '–';
  $('used-backend').textContent = res.backend || '–';
  $('timing').tBodies[0].replaceChildren(...res.timing.map(([name, ms, codec]) => row([name, ms.toFixed(2), codec])));
  $('result-view').hidden = false;
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) tr.insertCell().textContent = c;
  return tr;
}

// Every /blur method with the form's sigma, one after another; the fastest filter highlighted.
async function compare() {
  const sigma = $('param-sigma') ? $('param-sigma').value : '';
  const params = sigma === '' ? {} : { sigma: Number(sigma) };
  const body = $('compare-table').tBodies[0];
  body.replaceChildren();
  $('compare-view').hidden = false;
  let best = null;
  for (const m of endpoints.get('/blur')) {
    const res = await send('/blur', { ...params, method: m.name });
    const t = Object.fromEntries(res.timing.map(([name, ms]) => [name, ms]));
    const tr = row([m.name === 'auto' ? `auto (${res.method})` : m.name, fmt(t.total),
      fmt(t.filter), fmt(t.kernel), res.psnr || '–']);
    tr.dataset.method = m.name;
    body.append(tr);
    if (t.filter !== undefined && (!best || t.filter < best.ms)) best = { tr, ms: t.filter };
  }
  if (best) best.tr.classList.add('fastest');
}

function fmt(ms) {
  return ms === undefined ? '' : ms.toFixed(2);
}

function setFile(f) {
  file = f || null;
  if (file) {
    $('drop').firstChild.textContent = `${file.name} (${Math.round(file.size / 1024)} KiB) `;
  }
}

function init() {
  $('endpoint').addEventListener('change', showMethods);
  $('method').addEventListener('change', showParams);
  $('file').addEventListener('change', () => setFile($('file').files[0]));
  const drop = $('drop');
  drop.addEventListener('dragover', (e) => { e.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('over');
    setFile(e.dataTransfer.files[0]);
  });
  $('form').addEventListener('submit', (e) => { e.preventDefault(); busy(run); });
  $('compare').addEventListener('click', () => busy(compare));
  load().then(() => { document.body.dataset.ready = '1'; }, showError);
}

init();
