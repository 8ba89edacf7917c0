// The demo page in headless Chromium (make test-web): starts the real blurd ($BLURD_BIN, else
// build/blurd) on a free port, opens / in Debian's chromium ($CHROMIUM, else /usr/bin/chromium)
// through playwright-core, and uses the page as a person would. A wrong sigma must show the
// server's message; yvv at sigma 5 on tests/data/chelsea.png (a photograph) must show the result
// at the input's width with a PSNR above 30 dB and numeric stage times, and again as lossless WebP
// (the format and lossless selects) with libwebp as the encoder; the compare view must
// have one row per /blur method of /methods with numeric times and one fastest row. Any other
// console error, page error, failed request or HTTP error fails the test. Saves a screenshot to
// docs/demo.png, and to $WEB_OUT/demo.png when WEB_OUT is set. It also validates /openapi.json
// against the OpenAPI 3.1 schema (tests/integ_openapi.c checks it against the server).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
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
async function startServer() {
  const proc = spawn(bin, ['--bind', '127.0.0.1', '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
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
  check(decoder === 'libjpeg-turbo' || decoder === 'libpng' || /^nvjpeg/.test(decoder || ''), `the decoder is named (${decoder})`);
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
    await page.goto(`${base}/`);
    await page.waitForSelector('body[data-ready="1"]');
    const endpoints = await page.$$eval('#endpoint option', (o) => o.map((x) => x.value));
    check(endpoints.includes('/blur') && endpoints.includes('/convert'), `endpoints: ${endpoints.join(', ')}`);
    await page.setInputFiles('#file', photo);
    await wrongSigma(page, w);
    await blurOnce(page, pngWidth(photo));
    await webpOnce(page, pngWidth(photo));
    await compareView(page, methods);
    const shot = await page.screenshot({ fullPage: true });
    fs.writeFileSync(path.join(root, 'docs/demo.png'), shot);
    if (process.env.WEB_OUT) {
      fs.mkdirSync(process.env.WEB_OUT, { recursive: true });
      fs.writeFileSync(path.join(process.env.WEB_OUT, 'demo.png'), shot);
    }
    check(w.problems.length === 0, `no console error or failed request${w.problems.length ? `: ${w.problems.join('; ')}` : ''}`);
  } finally {
    await browser.close();
    proc.kill('SIGTERM');
  }
  const [code] = await once(proc, 'exit');
  check(code === 0, 'blurd drained and exited 0');
  console.log('demo.test: ok (screenshot in docs/demo.png)');
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
