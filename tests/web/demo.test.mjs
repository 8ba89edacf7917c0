// The demo page in headless Chromium (make test-web): starts the real blurd ($BLURD_BIN, else
// build/blurd) on a free port, opens / in Debian's chromium ($CHROMIUM, else /usr/bin/chromium)
// through playwright-core, and uses the page as a person would. A wrong sigma must show the
// server's message; yvv at sigma 5 on tests/data/chelsea.png (a photograph) must show the result
// at the input's width with a PSNR above 30 dB and numeric stage times, and again as lossless WebP
// (the format and lossless selects) with libwebp as the encoder; the compare view must
// have one row per /blur method of /methods with numeric times and one fastest row. A rectangle
// dragged with the mouse on the (scaled) preview must go out as regions in the image's pixels
// (within 1 pixel), and the answer must equal the input outside it and differ inside it; with
// feather, differ just outside it too and equal the input farther out; cleared, no regions go
// out. Per axis, the page must send sigma_x and sigma_y and no sigma, get a 200, and the answer
// must be smoother along y (sigma_y 12) than along x (sigma_x 1). /sharpen must run through the
// generic form and show a result with more edge energy than the input; /contrast and /convolve
// must run with the form's defaults and no method parameter. The answers' pixels are decoded
// here (tests/data/chelsea.png has an ICC profile that the browser would apply to the input
// only). Any other console error, page error, failed request or HTTP error fails the test.
// With an API key set, the page, its script and style sheet load without it; the first run
// answers 401 and the page shows a password box for the key; a wrong key is refused, the right
// one runs, goes out as X-API-Key, and is kept for the tab (sessionStorage) across a reload.
// An error after a result and a compare table hides both.
// Saves a screenshot (with a region drawn) to build/demo.png, or to $WEB_OUT/demo.png when WEB_OUT is set
// (WEB_OUT=docs updates the README's picture); a test run leaves the checkout clean. It also validates /openapi.json
// against the OpenAPI 3.1 schema (tests/integ_openapi.c checks it against the server).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';
import { Validator } from '@seriousme/openapi-schema-validator';
import { chromium } from 'playwright-core';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const bin = path.resolve(root, process.env.BLURD_BIN || 'build/blurd');
const photo = path.join(root, 'tests/data/chelsea.png');

function check(cond, what) {
  if (!cond) throw new Error(`FAIL: ${what}`);
  console.log(`  ok: ${what}`);
}

// Starts blurd on a free port; resolves to {proc, base} once /healthz answers.
async function startServer(extra = []) {
  const proc = spawn(bin, ['--bind', '127.0.0.1', '--port', '0', ...extra], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  proc.stdout.setEncoding('utf8');
  const port = await new Promise((resolve, reject) => {
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`blurd exited with ${code} before listening`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(`${base}/healthz`)).ok) return { proc, base };
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error('blurd never answered /healthz');
}

// The width in a PNG's IHDR.
function pngWidth(file) {
  return fs.readFileSync(file).readUInt32BE(16);
}

// An 8-bit non-interlaced PNG's pixels: {w, h, c (channels), px (Uint8Array, rows of w * c)}.
function decodePNG(buf) {
  check(buf.readUInt32BE(12) === 0x49484452, 'a PNG came back');
  const [w, h, depth, type, interlace] = [buf.readUInt32BE(16), buf.readUInt32BE(20), buf[24], buf[25], buf[28]];
  if (depth !== 8 || interlace !== 0) throw new Error(`decodePNG: depth ${depth}, interlace ${interlace}`);
  const c = { 0: 1, 2: 3, 4: 2, 6: 4 }[type];
  const idat = [];
  for (let i = 8; i < buf.length; i += 12 + buf.readUInt32BE(i)) {
    if (buf.toString('latin1', i + 4, i + 8) === 'IDAT') idat.push(buf.subarray(i + 8, i + 8 + buf.readUInt32BE(i)));
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = w * c;
  const px = new Uint8Array(stride * h);
  for (let y = 0; y < h; y++) {
    const f = raw[y * (stride + 1)];
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let i = 0; i < stride; i++) {
      const a = i >= c ? px[y * stride + i - c] : 0;
      const b = y > 0 ? px[(y - 1) * stride + i] : 0;
      const d = i >= c && y > 0 ? px[(y - 1) * stride + i - c] : 0;
      const p = a + b - d;
      const [pa, pb, pd] = [Math.abs(p - a), Math.abs(p - b), Math.abs(p - d)];
      const pred = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pd ? a : pb <= pd ? b : d][f];
      px[y * stride + i] = (src[i] + pred) & 255;
    }
  }
  return { w, h, c, px };
}

// Of the pixels (x, y) where pick(x, y) holds, how many differ between images a and b (any
// channel), and how many there are.
function differing(a, b, pick) {
  let n = 0;
  let diff = 0;
  for (let y = 0; y < a.h; y++) {
    for (let x = 0; x < a.w; x++) {
      if (!pick(x, y)) continue;
      n++;
      const i = (y * a.w + x) * a.c;
      for (let k = 0; k < a.c; k++) if (a.px[i + k] !== b.px[i + k]) { diff++; break; }
    }
  }
  return { n, diff };
}

// The mean absolute difference between horizontal and between vertical neighbours.
function gradients(img) {
  let [dx, dy] = [0, 0];
  const { w, h, c, px } = img;
  for (let y = 0; y < h - 1; y++) {
    for (let x = 0; x < w - 1; x++) {
      for (let k = 0; k < Math.min(c, 3); k++) {
        const i = (y * w + x) * c + k;
        dx += Math.abs(px[i + c] - px[i]);
        dy += Math.abs(px[i + w * c] - px[i]);
      }
    }
  }
  const n = (w - 1) * (h - 1) * Math.min(c, 3);
  return { dx: dx / n, dy: dy / n };
}

// Before the page's script: records the params field, the status and the body of each answer
// to a multipart body the page hands to fetch (playwright sees neither a request body that
// holds a file nor the body of an answer that the page reads as a blob).
function recordSent() {
  const fetch0 = window.fetch;
  window.sent = [];
  window.fetch = async function fetch(url, opts) {
    const r = await fetch0.apply(this, arguments);
    if (opts && opts.body instanceof FormData) {
      const bytes = new Uint8Array(await r.clone().arrayBuffer());
      let bin = '';
      for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
      window.sent.push({ url: new URL(url, location.href).pathname, params: opts.body.get('params'), status: r.status, body: btoa(bin) });
    }
    return r;
  };
}

// Clicks Run and waits for endpoint's answer and for the result to show; returns the params the
// page sent and the answer's body.
async function runCaptured(page, endpoint) {
  const [old, n] = await page.evaluate(() => [document.getElementById('result').src, window.sent.length]);
  await page.click('#run');
  await page.waitForFunction((k) => window.sent.length > k, n, { timeout: 60000 });
  const sent = await page.evaluate(() => window.sent.at(-1));
  const body = Buffer.from(sent.body, 'base64');
  check(sent.url === endpoint && sent.params !== null, `the page sent ${endpoint} a params field`);
  const params = JSON.parse(sent.params);
  check(sent.status === 200, `${endpoint} answered ${sent.status} to ${sent.params}${sent.status === 200 ? '' : `: ${body}`}`);
  await page.waitForFunction((o) => {
    const img = document.getElementById('result');
    return img.src !== o && img.complete && img.naturalWidth > 0 && document.getElementById('busy').hidden;
  }, old, { timeout: 60000 });
  check(await page.textContent('#error') === '', 'no error shown');
  return { params, body };
}

// Every console error, page error, failed request and HTTP error, unless expected() says so.
function watch(page) {
  const problems = [];
  let expected = () => false;
  page.on('console', (m) => { if (m.type() === 'error' && !expected(m.text())) problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', (r) => {
    if (r.status() >= 400 && !expected(`${r.status()} ${r.url()}`)) problems.push(`HTTP ${r.status()} ${r.url()}`);
  });
  return { problems, expect: (fn) => { expected = fn; } };
}

async function wrongSigma(page, w) {
  w.expect((text) => /\b400\b/.test(text)); // the 400 this step asks for, and Chrome's note of it
  await page.selectOption('#endpoint', '/blur');
  await page.selectOption('#method', 'yvv');
  await page.fill('#param-sigma', '1000');
  await page.click('#run');
  await page.waitForSelector('#error:not([hidden])');
  const msg = await page.textContent('#error');
  check(/sigma must be a number from 0\.5 to 300/.test(msg), `the server's message is shown: "${msg}"`);
  w.expect(() => false);
}

// An error after a result and a compare table: neither stays on the page under the message.
async function staleCleared(page, w) {
  check(await page.isVisible('#result-view') && await page.isVisible('#compare-view'),
    'a result and a compare table are shown');
  w.expect((text) => /\b400\b/.test(text));
  await page.fill('#param-sigma', '1000');
  await page.click('#run');
  await page.waitForSelector('#error:not([hidden])');
  w.expect(() => false);
  const left = await page.evaluate(() => ({
    result: !document.getElementById('result-view').hidden,
    compare: !document.getElementById('compare-view').hidden,
    rows: document.querySelectorAll('#compare-table tbody tr, #timing tbody tr').length,
    src: document.getElementById('result').hasAttribute('src'),
  }));
  check(!left.result && !left.compare && left.rows === 0 && !left.src,
    `an error clears the previous result and compare table (${JSON.stringify(left)})`);
  await page.fill('#param-sigma', '5');
}

async function blurOnce(page, width) {
  await page.fill('#param-sigma', '5');
  await page.click('#run');
  await page.waitForFunction(() => {
    const img = document.getElementById('result');
    return !document.getElementById('result-view').hidden && img.complete && img.naturalWidth > 0;
  }, null, { timeout: 60000 });
  check(await page.textContent('#error') === '', 'no error shown');
  const got = await page.$eval('#result', (img) => img.naturalWidth);
  check(got === width, `the result image loaded at the input's width (${got} = ${width})`);
  check(await page.$eval('#original', (img) => img.naturalWidth) === width, 'the original is shown beside it');
  const psnr = Number(await page.textContent('#psnr'));
  check(Number.isFinite(psnr) && psnr > 30, `PSNR ${psnr} dB > 30`);
  check(await page.textContent('#used-method') === 'yvv', 'method yvv ran');
  check((await page.textContent('#used-backend')).length > 0, 'the backend is named');
  const stages = await page.$$eval('#timing tbody tr', (rows) => rows.map((r) => [r.cells[0].textContent, r.cells[1].textContent]));
  const names = stages.map((s) => s[0]);
  check(['decode', 'filter', 'encode', 'total'].every((n) => names.includes(n)), `stage times: ${names.join(', ')}`);
  check(stages.every(([, ms]) => ms !== '' && Number.isFinite(Number(ms)) && Number(ms) >= 0), 'every stage time is a number');
  const codecs = await page.$$eval('#timing tbody tr', (rows) => rows.map((r) => [r.cells[0].textContent, r.cells[2].textContent]));
  const decoder = (codecs.find(([n]) => n === 'decode') || [])[1];
  check(['libjpeg-turbo', 'libpng', 'libdeflate'].includes(decoder) || /^nvjpeg/.test(decoder || ''), `the decoder is named (${decoder})`);
}

// The same blur answered as lossless WebP: the result loads at the input's width, encoded by
// libwebp; then the form goes back to the input's format.
async function webpOnce(page, width) {
  await page.selectOption('#param-format', 'webp');
  await page.selectOption('#param-lossless', 'true');
  await page.click('#run');
  await page.waitForFunction(() => {
    const img = document.getElementById('result');
    const rows = [...document.querySelectorAll('#timing tbody tr')];
    return rows.some((r) => r.cells[0].textContent === 'encode' && r.cells[2].textContent === 'libwebp')
      && img.complete && img.naturalWidth > 0;
  }, null, { timeout: 60000 });
  check(await page.textContent('#error') === '', 'no error shown');
  const got = await page.$eval('#result', (img) => img.naturalWidth);
  check(got === width, `the lossless WebP result loaded at the input's width (${got} = ${width})`);
  await page.selectOption('#param-format', 'input');
  await page.selectOption('#param-lossless', 'false');
}

async function compareView(page, methods) {
  await page.click('#compare');
  await page.waitForFunction((n) => document.querySelectorAll('#compare-table tbody tr').length === n
    && document.getElementById('busy').hidden, methods.length, { timeout: 300000 });
  check(await page.textContent('#error') === '', 'no error shown');
  const rows = await page.$$eval('#compare-table tbody tr', (trs) => trs.map((tr) => ({
    method: tr.dataset.method, cells: [...tr.cells].map((c) => c.textContent), fastest: tr.classList.contains('fastest'),
  })));
  check(rows.map((r) => r.method).join() === methods.join(), `one row per /blur method: ${methods.join(', ')}`);
  for (const r of rows) {
    const [total, filter] = [Number(r.cells[1]), Number(r.cells[2])];
    check(r.cells[1] !== '' && total > 0 && r.cells[2] !== '' && filter > 0 && filter <= total,
      `${r.cells[0]}: total ${total} ms, filter ${filter} ms, PSNR ${r.cells[4]}`);
    check(r.cells[4] === 'inf' || Number(r.cells[4]) > 20, `${r.method}: PSNR is a number`);
  }
  const fastest = rows.filter((r) => r.fastest);
  check(fastest.length === 1, `one fastest row (${fastest[0]?.method})`);
  const min = Math.min(...rows.map((r) => Number(r.cells[2])));
  check(Number(fastest[0].cells[2]) === min, 'the fastest row has the smallest filter time');
}

// Drags a rectangle on the preview from image pixel (x0, y0) to (x1, y1), converted to CSS
// pixels here from the preview's displayed box; returns the displayed scale.
async function drag(page, [x0, y0], [x1, y1]) {
  const { left, top, width, height, nw, nh } = await page.$eval('#preview', (img) => {
    const b = img.getBoundingClientRect();
    return { left: b.left, top: b.top, width: b.width, height: b.height, nw: img.naturalWidth, nh: img.naturalHeight };
  });
  const at = (x, y) => [left + (x * width) / nw, top + (y * height) / nh];
  await page.mouse.move(...at(x0, y0));
  await page.mouse.down();
  await page.mouse.move(...at((x0 + x1) / 2, (y0 + y1) / 2), { steps: 3 });
  await page.mouse.move(...at(x1, y1), { steps: 3 });
  await page.mouse.up();
  return width / nw;
}

// A rectangle drawn on the preview goes out as regions, in the image's pixels; only it changes.
async function regionsStep(page, input) {
  await page.selectOption('#endpoint', '/blur');
  await page.selectOption('#method', 'yvv');
  check(await page.isVisible('#region-tools'), 'the region tools show for /blur');
  check(await page.$('#param-regions') === null, 'no generic input for regions');
  check(await page.isDisabled('#param-feather'), 'feather is disabled while there is no region');
  await page.fill('#param-sigma', '5');
  const want = [120, 60, 150, 110];
  const scale = await drag(page, [want[0], want[1]], [want[0] + want[2], want[1] + want[3]]);
  check(Math.abs(scale - 1) > 0.1, `the preview is shown scaled (${scale.toFixed(3)} CSS px per image px)`);
  check(await page.$$eval('#stage .region', (r) => r.length) === 1, 'one outline drawn over the preview');
  await drag(page, [300, 200], [300, 200]); // a click, not a drag
  check(await page.$$eval('#stage .region', (r) => r.length) === 1, 'a click draws no region');
  const box = await page.$eval('#stage .region', (el) => {
    const [r, s] = [el.getBoundingClientRect(), document.getElementById('preview').getBoundingClientRect()];
    return [r.left - s.left, r.top - s.top, r.width, r.height].map((v) => v * document.getElementById('preview').naturalWidth / s.width);
  });
  check(box.every((v, i) => Math.abs(v - want[i]) <= 1.5), `the outline sits at the rectangle (${box.map((v) => v.toFixed(1)).join(', ')})`);

  let { params, body } = await runCaptured(page, '/blur');
  const got = params.regions;
  check(Array.isArray(got) && got.length === 1 && got[0].length === 4 && got[0].every((v, i) => Number.isInteger(v) && Math.abs(v - want[i]) <= 1),
    `regions sent in image pixels: ${JSON.stringify(got)} ≈ [${want}]`);
  check(params.sigma === 5 && params.method === 'yvv' && !('feather' in params), `params ${JSON.stringify(params)}`);
  const [rx, ry, rw, rh] = got[0];
  let out = decodePNG(body);
  check(out.w === input.w && out.h === input.h && out.c === input.c, `the answer is ${out.w}x${out.h}x${out.c}, as the input`);
  const outside = differing(out, input, (x, y) => x < rx - 1 || x > rx + rw || y < ry - 1 || y > ry + rh);
  check(outside.n > 100000 && outside.diff === 0, `outside the region, ${outside.diff} of ${outside.n} pixels differ from the input`);
  const inside = differing(out, input, (x, y) => x >= rx + 2 && x < rx + rw - 2 && y >= ry + 2 && y < ry + rh - 2);
  check(inside.diff > 0.8 * inside.n, `inside it, ${inside.diff} of ${inside.n} pixels differ`);

  check(!(await page.isDisabled('#param-feather')), 'feather is enabled with a region');
  await page.fill('#param-feather', '10');
  ({ params, body } = await runCaptured(page, '/blur'));
  check(params.feather === 10 && params.regions.length === 1, `feather sent: ${JSON.stringify(params)}`);
  out = decodePNG(body);
  const ramp = differing(out, input, (x, y) => x >= rx + rw + 2 && x < rx + rw + 5 && y >= ry + 10 && y < ry + rh - 10);
  check(ramp.diff > 0.5 * ramp.n, `feather 10: 2-4 px right of the region, ${ramp.diff} of ${ramp.n} pixels differ`);
  const far = differing(out, input, (x, y) => x < rx - 12 || x > rx + rw + 11 || y < ry - 12 || y > ry + rh + 11);
  check(far.diff === 0, `feather 10: more than 11 px out, ${far.diff} of ${far.n} pixels differ`);
}

// Clear regions removes them: no outline, feather disabled, no regions sent.
async function clearRegions(page) {
  await page.click('#clear-regions');
  check(await page.$$eval('#stage .region', (r) => r.length) === 0, 'clear regions removes the outlines');
  check(await page.isDisabled('#param-feather'), 'feather is disabled again');
  const { params } = await runCaptured(page, '/blur');
  check(!('regions' in params) && !('feather' in params), `cleared, no regions go out: ${JSON.stringify(params)}`);
}

// Per axis: sigma_x and sigma_y go out, sigma does not, and the blur follows them.
async function perAxisStep(page, input) {
  await page.selectOption('#sigma-mode', 'axes');
  check(await page.isHidden('#param-sigma') && await page.isVisible('#param-sigma_x') && await page.isVisible('#param-sigma_y'),
    'per axis shows sigma_x and sigma_y in place of sigma');
  await page.fill('#param-sigma_x', '1');
  await page.fill('#param-sigma_y', '12');
  const { params, body } = await runCaptured(page, '/blur');
  check(params.sigma_x === 1 && params.sigma_y === 12 && !('sigma' in params) && !('regions' in params),
    `per axis sends sigma_x and sigma_y only: ${JSON.stringify(params)}`);
  const [g, g0] = [gradients(decodePNG(body)), gradients(input)];
  check(g.dy < 0.5 * g.dx && g0.dy > 0.5 * g0.dx,
    `smoother along y: mean |dy| ${g.dy.toFixed(2)} < half |dx| ${g.dx.toFixed(2)} (input ${g0.dy.toFixed(2)}, ${g0.dx.toFixed(2)})`);
  await page.selectOption('#sigma-mode', 'same');
  check(await page.isVisible('#param-sigma') && await page.isHidden('#param-sigma_x'), 'same on both axes shows sigma again');
}

// /sharpen through the generic form: its parameters come from /methods; the result shows.
async function sharpenStep(page, input, blurMethods) {
  await page.selectOption('#endpoint', '/sharpen');
  for (const n of ['sigma', 'amount', 'threshold', 'luma', 'format']) check(await page.isVisible(`#param-${n}`), `/sharpen shows ${n}`);
  check(await page.$('#sigma-mode') === null && await page.isHidden('#region-tools'), '/sharpen has no per-axis select and no region tools');
  await page.fill('#param-sigma', '2');
  await page.fill('#param-amount', '2');
  const { params, body } = await runCaptured(page, '/sharpen');
  check(params.sigma === 2 && params.amount === 2 && (params.method === undefined || blurMethods.includes(params.method)),
    `/sharpen params: ${JSON.stringify(params)}`);
  check(await page.textContent('#result-caption') === '/sharpen result', 'the /sharpen result is shown');
  check(await page.$eval('#result', (img) => img.naturalWidth) === input.w, 'at the input\'s width');
  const [g, g0] = [gradients(decodePNG(body)), gradients(input)];
  check(g.dx + g.dy > 1.2 * (g0.dx + g0.dy), `sharper: mean |dx| + |dy| ${(g.dx + g.dy).toFixed(2)} > 1.2 x the input's ${(g0.dx + g0.dy).toFixed(2)}`);
}

// The endpoints whose one /methods entry takes no method parameter run with the form's
// defaults, and the entry's name does not go out as a method.
async function oneMethodEndpoints(page) {
  for (const endpoint of ['/contrast', '/convolve']) {
    await page.selectOption('#endpoint', endpoint);
    const { params } = await runCaptured(page, endpoint);
    check(!('method' in params), `${endpoint} runs without a method parameter: ${JSON.stringify(params)}`);
  }
}

// The page against a server with an API key: it asks for the key on the first 401 and sends it.
async function keyStep(browser) {
  const key = 'demo-k3y';
  const { proc, base } = await startServer(['--api-key', key]);
  try {
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    const w = watch(page);
    w.expect((text) => /\b401\b/.test(text)); // the 401s this step asks for, and Chrome's notes
    const sent = [];
    page.on('request', (r) => { if (r.method() === 'POST') sent.push(r.headers()['x-api-key'] || null); });
    await page.goto(`${base}/`);
    await page.waitForSelector('body[data-ready="1"]');
    check(await page.isHidden('#key-box'), 'with a key set, the page loads (its script and style sheet too) and asks for nothing yet');
    await page.setInputFiles('#file', photo);
    await page.selectOption('#endpoint', '/blur');
    await page.selectOption('#method', 'yvv');
    await page.fill('#param-sigma', '2');
    await page.click('#run');
    await page.waitForSelector('#error:not([hidden])');
    check(await page.isVisible('#key-box') && await page.getAttribute('#api-key', 'type') === 'password',
      'a 401 shows the password box for the key');
    check(/needs its API key/.test(await page.textContent('#error')), `the page says why: "${await page.textContent('#error')}"`);
    await page.fill('#api-key', 'wrong');
    await page.click('#run');
    await page.waitForFunction(() => /refused this API key/.test(document.getElementById('error').textContent));
    check(true, 'a wrong key is refused with a sentence');
    await page.fill('#api-key', key);
    await page.click('#run');
    await page.waitForFunction(() => !document.getElementById('result-view').hidden && document.getElementById('result').naturalWidth > 0,
      null, { timeout: 60000 });
    check(sent.length === 3 && sent[0] === null && sent[1] === 'wrong' && sent[2] === key,
      `the key goes out as X-API-Key once given (${JSON.stringify(sent)})`);
    await page.reload();
    await page.waitForSelector('body[data-ready="1"]');
    check(await page.inputValue('#api-key') === key && await page.isVisible('#key-box'), 'the key is kept for the tab across a reload');
    check(w.problems.length === 0, `no other console error or failed request${w.problems.length ? `: ${w.problems.join('; ')}` : ''}`);
    await page.close();
  } finally {
    proc.kill('SIGTERM');
  }
  const [code] = await once(proc, 'exit');
  check(code === 0, 'the keyed blurd exited 0');
}

async function main() {
  const { proc, base } = await startServer();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'], // root in CI containers
  });
  try {
    const v = new Validator();
    const res = await v.validate(await (await fetch(`${base}/openapi.json`)).json());
    check(res.valid && v.version === '3.1', `/openapi.json is valid OpenAPI ${v.version}${res.valid ? '' : `: ${JSON.stringify(res.errors).slice(0, 500)}`}`);
    const methods = (await (await fetch(`${base}/methods`)).json()).methods
      .filter((m) => m.endpoint === '/blur').map((m) => m.name);
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
    const w = watch(page);
    await page.addInitScript(recordSent);
    await page.goto(`${base}/`);
    await page.waitForSelector('body[data-ready="1"]');
    const endpoints = await page.$$eval('#endpoint option', (o) => o.map((x) => x.value));
    check(['/blur', '/convert', '/sharpen'].every((e) => endpoints.includes(e)), `endpoints: ${endpoints.join(', ')}`);
    await page.setInputFiles('#file', photo);
    await wrongSigma(page, w);
    await blurOnce(page, pngWidth(photo));
    await webpOnce(page, pngWidth(photo));
    await compareView(page, methods);
    await staleCleared(page, w);
    const input = decodePNG(fs.readFileSync(photo));
    await perAxisStep(page, input);
    await oneMethodEndpoints(page);
    await sharpenStep(page, input, methods);
    await regionsStep(page, input);
    const shot = await page.screenshot({ fullPage: true });
    const shotDir = process.env.WEB_OUT || path.join(root, 'build');
    fs.mkdirSync(shotDir, { recursive: true });
    fs.writeFileSync(path.join(shotDir, 'demo.png'), shot);
    await clearRegions(page);
    await keyStep(browser);
    check(w.problems.length === 0, `no console error or failed request${w.problems.length ? `: ${w.problems.join('; ')}` : ''}`);
  } finally {
    await browser.close();
    proc.kill('SIGTERM');
  }
  const [code] = await once(proc, 'exit');
  check(code === 0, 'blurd drained and exited 0');
  console.log(`demo.test: ok (screenshot in ${path.join(process.env.WEB_OUT || 'build', 'demo.png')})`);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
