// The demo page's script (plain JavaScript, no library). The endpoints, methods and parameter
// forms come from the service itself: /methods lists each method with its endpoint and the
// parameters it takes; upload endpoints that have no methods (/convert) come from
// /openapi.json. A request is a multipart form with the image and a params JSON object; the
// answer is the image, with its stage times in Server-Timing and its PSNR in X-PSNR.
// Two parameters get their own controls: where a method takes sigma, sigma_x and sigma_y, a
// select picks one sigma for both axes or one per axis (never both: the server refuses that);
// a regions parameter is drawn with the mouse on the preview of the image, as rectangles in
// the image's own pixels, and sent only when there is one.
// When the service has an API key, the page and what it reads first (/methods, /openapi.json)
// are open; the first request that answers 401 shows a password box for the key, which is kept
// in sessionStorage (this tab only) and sent as X-API-Key.
'use strict';

const $ = (id) => document.getElementById(id);
const endpoints = new Map(); // path -> [{name, description, params}] (name null: no methods)
const INPUT_TYPES = ['number', 'integer', 'boolean', 'string'];
const MAX_REGIONS = 64; // unless the regions parameter says (max_items)
const KEY_ITEM = 'blurd-api-key'; // the API key, in sessionStorage
let file = null;
let urls = []; // object URLs to revoke when replaced
let previewURL = null;
let regions = []; // [x, y, w, h] in the image's pixels
let regionsParam = null; // the current method's regions parameter, or null
let sigmaMode = 'same'; // 'same': sigma; 'axes': sigma_x and sigma_y

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

// Does the method select give m's method parameter? Only where m takes one and m's name is
// among its choices (/sharpen's one entry takes any /blur method; /contrast's takes none).
function methodFromSelect(m) {
  const p = m && m.name && m.params.find((q) => q.name === 'method');
  return Boolean(p) && (!p.choices || p.choices.includes(m.name));
}

// One input per parameter: a select for choices and booleans, a number box with its range;
// null for a type this page does not know.
function paramInput(p) {
  if (!p.choices && !INPUT_TYPES.includes(p.type)) return null;
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
  if (p.default !== undefined) el.value = el.dataset.default = p.default;
  el.required = p.required;
  return el;
}

function showParams() {
  const m = currentMethod();
  $('method-desc').textContent = m ? `${m.description}${m.accuracy ? ` · accuracy ${m.accuracy}` : ''}` : '';
  const box = $('params');
  box.replaceChildren();
  const params = m ? m.params : [];
  const names = params.map((p) => p.name);
  const axes = ['sigma', 'sigma_x', 'sigma_y'].every((n) => names.includes(n));
  regionsParam = null;
  for (const p of params) {
    if (p.name === 'method' && methodFromSelect(m)) continue; // the method select sets it
    if (p.name === 'regions' || p.type === 'regions') { regionsParam = p; continue; } // drawn
    const input = paramInput(p);
    if (!input) continue;
    if (axes && p.name === 'sigma') box.append(sigmaModeSelect());
    const label = document.createElement('label');
    label.title = p.description;
    const range = p.min !== undefined ? ` (${p.min}–${p.max})` : '';
    const required = p.required && !(axes && p.name.startsWith('sigma')); // sigma or both axes
    label.append(`${p.name}${required ? ' *' : ''}${range} `, input);
    if (axes && p.name.startsWith('sigma')) label.dataset.axes = p.name === 'sigma' ? 'same' : 'axes';
    box.append(label);
  }
  showSigmaMode();
  showRegions();
}

// The select between one sigma for both axes and one per axis.
function sigmaModeSelect() {
  const sel = document.createElement('select');
  sel.id = 'sigma-mode'; // no name: not a parameter
  sel.add(new Option('same on both axes (sigma)', 'same'));
  sel.add(new Option('per axis (sigma_x, sigma_y)', 'axes'));
  sel.value = sigmaMode;
  sel.addEventListener('change', () => {
    sigmaMode = sel.value;
    const sigma = $('param-sigma').value;
    for (const id of ['param-sigma_x', 'param-sigma_y']) {
      if (sigmaMode === 'axes' && $(id).value === '') $(id).value = sigma;
    }
    if (sigmaMode === 'same' && $('param-sigma').value === '') $('param-sigma').value = $('param-sigma_x').value;
    showSigmaMode();
  });
  const label = document.createElement('label');
  label.append('sigma ', sel);
  return label;
}

// Shows the sigma boxes of the chosen mode; the others are disabled, so not sent.
function showSigmaMode() {
  for (const label of $('params').querySelectorAll('label[data-axes]')) {
    label.hidden = label.dataset.axes !== sigmaMode;
    label.querySelector('input').disabled = label.hidden;
  }
}

// The form's parameters as a JSON object: numbers as numbers; empty and disabled boxes and
// values equal to the parameter's default left out (the server treats a value given as meant:
// feather without regions, a bias over a named kernel's); the regions when the method takes
// them and there are some.
function formParams() {
  const out = {};
  if (methodFromSelect(currentMethod())) out.method = $('method').value;
  if (regionsParam && regions.length) out.regions = regions.map((r) => [...r]);
  for (const el of $('params').querySelectorAll('input, select')) {
    if (!el.name || el.disabled || el.value === '' || el.value === el.dataset.default) continue;
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

// The X-API-Key header of the key the user gave, if any.
function keyHeaders() {
  const key = sessionStorage.getItem(KEY_ITEM);
  return key ? { 'X-API-Key': key } : {};
}

// POSTs the image with params to path; returns {blob, timing, psnr, method, backend}, or throws
// the server's error message.
async function send(path, params) {
  const fd = new FormData();
  fd.append('image', file, file.name);
  fd.append('params', JSON.stringify(params));
  const r = await fetch(path, { method: 'POST', body: fd, headers: keyHeaders() });
  if (r.status === 401) {
    $('key-box').hidden = false;
    $('api-key').focus();
    throw new Error(sessionStorage.getItem(KEY_ITEM)
      ? 'The service refused this API key: enter the right one and run again.'
      : 'This service needs its API key: enter it in the box above and run again.');
  }
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

// Hides the last result and compare table, so that an error never shows under the answer to an
// earlier request as if it were this one's.
function clearResults() {
  for (const u of urls) URL.revokeObjectURL(u);
  urls = [];
  for (const id of ['original', 'result']) $(id).removeAttribute('src');
  $('timing').tBodies[0].replaceChildren();
  $('compare-table').tBodies[0].replaceChildren();
  $('result-view').hidden = true;
  $('compare-view').hidden = true;
}

async function busy(fn) {
  showError(null);
  if (!file) return showError(new Error('Choose an image first.'));
  for (const b of document.querySelectorAll('button')) b.disabled = true;
  $('busy').hidden = false;
  try { await fn(); } catch (e) { clearResults(); showError(e); }
  for (const b of document.querySelectorAll('button')) b.disabled = false;
  $('compare').disabled = !endpoints.has('/blur');
  $('clear-regions').disabled = regions.length === 0;
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

// Every /blur method with the form's sigma (or sigma_x and sigma_y), one after another, on the
// whole image; the fastest filter highlighted.
async function compare() {
  const form = formParams();
  const params = {};
  for (const k of ['sigma', 'sigma_x', 'sigma_y']) if (form[k] !== undefined) params[k] = form[k];
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
  if (previewURL) URL.revokeObjectURL(previewURL);
  previewURL = file ? URL.createObjectURL(file) : null;
  if (previewURL) $('preview').src = previewURL;
  else $('preview').removeAttribute('src');
  $('preview-box').hidden = !file;
  regions = []; // they were in the old image's pixels
  showRegions();
}

// The regions: outlines over the preview (in % of the image, so they follow its displayed
// size), their list, and the tools only where the method takes regions.
function showRegions() {
  const img = $('preview');
  const [w, h] = [img.naturalWidth, img.naturalHeight];
  $('stage').querySelectorAll('.region:not(.draft)').forEach((el) => el.remove());
  if (w && h) for (const r of regions) $('stage').append(outline(r, w, h));
  $('region-tools').hidden = !regionsParam;
  $('stage').classList.toggle('drawable', Boolean(regionsParam));
  $('clear-regions').disabled = regions.length === 0;
  if ($('param-feather')) $('param-feather').disabled = regions.length === 0; // regions only
  $('region-list').textContent = regions.length
    ? `${regions.length} region${regions.length > 1 ? 's' : ''} [x, y, w, h]: ${regions.map((r) => `[${r.join(', ')}]`).join(' ')}`
    : 'no region: the whole image';
}

function outline([x, y, rw, rh], w, h, el = document.createElement('div')) {
  el.classList.add('region');
  el.style.left = `${(100 * x) / w}%`;
  el.style.top = `${(100 * y) / h}%`;
  el.style.width = `${(100 * rw) / w}%`;
  el.style.height = `${(100 * rh) / h}%`;
  return el;
}

// The pointer's position in the image's own pixels: the displayed size scaled to the natural.
function imagePoint(e) {
  const img = $('preview');
  const box = img.getBoundingClientRect();
  const clamp = (v, hi) => Math.min(Math.max(v, 0), hi);
  return [clamp(((e.clientX - box.left) * img.naturalWidth) / box.width, img.naturalWidth),
    clamp(((e.clientY - box.top) * img.naturalHeight) / box.height, img.naturalHeight)];
}

// The rectangle between two image points, rounded to whole pixels.
function rectOf([x0, y0], [x1, y1]) {
  const [l, t] = [Math.round(Math.min(x0, x1)), Math.round(Math.min(y0, y1))];
  return [l, t, Math.round(Math.max(x0, x1)) - l, Math.round(Math.max(y0, y1)) - t];
}

// Drag on the preview to draw a rectangle; a click without a drag draws nothing.
function initDrawing() {
  const stage = $('stage');
  const img = $('preview');
  let start = null;
  let draft = null;
  stage.addEventListener('pointerdown', (e) => {
    if (!regionsParam || e.button !== 0 || !img.naturalWidth) return;
    e.preventDefault();
    const max = regionsParam.max_items || MAX_REGIONS;
    if (regions.length >= max) return showError(new Error(`At most ${max} regions.`));
    start = imagePoint(e);
    draft = document.createElement('div');
    draft.className = 'region draft';
    stage.append(outline(rectOf(start, start), img.naturalWidth, img.naturalHeight, draft));
    stage.setPointerCapture(e.pointerId);
  });
  stage.addEventListener('pointermove', (e) => {
    if (start) outline(rectOf(start, imagePoint(e)), img.naturalWidth, img.naturalHeight, draft);
  });
  const end = (e) => {
    if (!start) return;
    const r = rectOf(start, imagePoint(e));
    start = null;
    draft.remove();
    if (e.type === 'pointerup' && r[2] >= 1 && r[3] >= 1) regions.push(r);
    showRegions();
  };
  stage.addEventListener('pointerup', end);
  stage.addEventListener('pointercancel', end);
  img.addEventListener('load', showRegions);
  $('clear-regions').addEventListener('click', () => { regions = []; showRegions(); });
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
  $('api-key').value = sessionStorage.getItem(KEY_ITEM) || '';
  $('key-box').hidden = !$('api-key').value;
  $('api-key').addEventListener('input', () => {
    const key = $('api-key').value.trim();
    if (key) sessionStorage.setItem(KEY_ITEM, key); else sessionStorage.removeItem(KEY_ITEM);
  });
  $('compare').addEventListener('click', () => busy(compare));
  initDrawing();
  load().then(() => { document.body.dataset.ready = '1'; }, showError);
}

init();
