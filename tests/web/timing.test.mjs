// Server-Timing across origins in headless Chromium (make test-web): a page served from another
// origin (a small node:http server here, on another port) fetches POST /blur from the real blurd
// ($BLURD_BIN, else build/blurd) and reads the Resource Timing entry of that request. A browser
// fills its serverTiming only when the answer's Timing-Allow-Origin names the page's origin (or
// is *), so this fails without that header. Runs blurd with --cors-origins naming the page's origin, then
// with --cors-origins '*'; each time the page must see the stages queue, decode, filter, encode and total
// with their durations, and read every X- header that blurd sends (Access-Control-Expose-Headers).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const bin = path.resolve(root, process.env.BLURD_BIN || 'build/blurd');
const image = fs.readFileSync(path.join(root, 'tests/data/camera.png'));

function check(cond, what) {
  if (!cond) throw new Error(`FAIL: ${what}`);
  console.log(`  ok: ${what}`);
}

// Starts blurd with these flags on a free port; resolves to {proc, base} once /healthz answers.
async function startBlurd(flags) {
  const proc = spawn(bin, ['--bind', '127.0.0.1', '--port', '0', '--access-log', 'off', ...flags],
    { stdio: ['ignore', 'pipe', 'inherit'] });
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

// The other origin: an empty page at / and the upload at /camera.png.
async function startOrigin() {
  const srv = http.createServer((req, res) => {
    if (req.url === '/camera.png') {
      res.writeHead(200, { 'Content-Type': 'image/png' });
      res.end(image);
    } else {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end('<!doctype html><title>another origin</title><p>another origin</p>');
    }
  });
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  return { srv, origin: `http://127.0.0.1:${srv.address().port}` };
}

// In the page: POSTs the image to url, waits for its Resource Timing entry; returns what the
// page can see of the answer.
async function crossOriginBlur(url, names) {
  const img = await (await fetch('/camera.png')).arrayBuffer();
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'image/png' }, body: img });
  const bytes = (await res.arrayBuffer()).byteLength;
  let entry;
  for (let i = 0; i < 100 && !entry; i++) {
    entry = performance.getEntriesByName(url).pop();
    if (!entry) await new Promise((r) => setTimeout(r, 20));
  }
  return {
    status: res.status,
    bytes,
    timing: entry ? entry.serverTiming.map((t) => ({ name: t.name, duration: t.duration })) : null,
    headers: Object.fromEntries(names.map((n) => [n, res.headers.get(n)])),
  };
}

async function runCase(browser, origin, cors) {
  const { proc, base } = await startBlurd(['--cors-origins', cors === '*' ? '*' : origin]);
  try {
    const url = `${base}/blur?sigma=2&method=yvv`;
    // what blurd sends, seen from here (no browser rules): its X- headers
    const direct = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'image/png', Origin: origin }, body: image });
    await direct.arrayBuffer();
    const xNames = [...direct.headers.keys()].filter((n) => n.toLowerCase().startsWith('x-'));
    const page = await browser.newPage();
    await page.goto(`${origin}/`);
    const seen = await page.evaluate(([u, n]) => window.crossOriginBlur(u, n), [url, xNames]);
    await page.close();
    check(seen.status === 200 && seen.bytes > 1000, `--cors ${cors}: the page got the blurred PNG (${seen.bytes} bytes)`);
    const stages = (seen.timing || []).map((t) => t.name);
    check(['queue', 'decode', 'filter', 'encode', 'total'].every((s) => stages.includes(s)),
      `--cors ${cors}: the page on ${origin} reads serverTiming from ${base}: ${stages.join(', ') || 'nothing'}`);
    check(seen.timing.every((t) => t.duration >= 0) && seen.timing.find((t) => t.name === 'total').duration > 0,
      `--cors ${cors}: with durations (total ${seen.timing.find((t) => t.name === 'total').duration} ms)`);
    check(direct.headers.get('timing-allow-origin') === (cors === '*' ? '*' : origin),
      `--cors ${cors}: Timing-Allow-Origin: ${direct.headers.get('timing-allow-origin')}`);
    const hidden = xNames.filter((n) => seen.headers[n] === null);
    check(xNames.length >= 5 && hidden.length === 0,
      `--cors ${cors}: the page reads every X- header (${xNames.join(', ')})${hidden.length ? `; hidden: ${hidden.join(', ')}` : ''}`);
  } finally {
    proc.kill('SIGTERM');
  }
  const [code] = await once(proc, 'exit');
  check(code === 0, `--cors ${cors}: blurd exited 0`);
}

async function main() {
  const { srv, origin } = await startOrigin();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'], // root in CI containers
  });
  try {
    const context = await browser.newContext();
    await context.addInitScript({ content: `window.crossOriginBlur = ${crossOriginBlur.toString()};` });
    await runCase(context, origin, 'origin');
    await runCase(context, origin, '*');
  } finally {
    await browser.close();
    srv.close();
  }
  console.log('timing.test: ok');
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
