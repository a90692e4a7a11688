#!/usr/bin/env node
// The web UI of `deltafin serve` (coordinator/server/webui/) in headless Chromium (Debian's
// /usr/bin/chromium, driven by playwright-core from tools/node_modules): serve runs the demo
// model with an API key, the demo draft and three loopback df-nodes. The page asks for the key;
// a chat answer streamed into the page at temperature 0 equals, character for character, the
// text the API returns for the same request; the answer shows tokens/s and the draft's
// acceptance; the conversation survives a reload (localStorage); Stop ends a long answer; the
// dashboard lists the three nodes, draws placement and heat, and shows two ready nodes within
// a bounded time after one is killed. Also: the static files need no key, answer 304 to
// their ETag and HEAD without a body; /v1/cluster needs the key; unknown URLs keep their 404
// JSON. The page refuses a non-ASCII key (typed or stored), keeps a message sent before the
// key, sends a default max_tokens (half the context), gives a failed turn back to the prompt
// box instead of resending it, leaves the oldest turns out when the context is full, and
// polls /v1/cluster only while the dashboard is shown.
// Screenshots (chat.png, context.png, cluster-3.png, cluster-2.png) and every log stay in WORK_DIR.
//
// usage: node webui_test.js DELTAFIN DF_NODE MODEL_DIR DRAFT_DIR TOOLS_DIR WORK_DIR
// Fails (never skips) when chromium or playwright-core is missing: tools/install-deps.sh
// installs both. DF_CHROMIUM overrides the browser's path.
'use strict';
const fs = require('fs');
const net = require('net');
const path = require('path');
const crypto = require('crypto');
const { spawn, execFileSync } = require('child_process');
const { check, failures, finish } = require('./server_util.js');

const [EXE, DFNODE, MODEL, DRAFT, TOOLS, WORK] = process.argv.slice(2);
if (!WORK) {
  console.log('usage: node webui_test.js DELTAFIN DF_NODE MODEL_DIR DRAFT_DIR TOOLS_DIR WORK_DIR');
  process.exit(2);
}
const CHROMIUM = process.env.DF_CHROMIUM || '/usr/bin/chromium';
const KEY = 'webui-' + crypto.randomBytes(12).toString('hex');
const NAME = path.basename(MODEL.replace(/\/+$/, ''));
const SYSTEM = 'Answer in plain English.';
const PROMPT = 'The committee reported that the new school';
const MAX_TOKENS = 24;
const T0 = Date.now();
const procs = [];

function log(what) {
  console.log(`[${((Date.now() - T0) / 1000).toFixed(1)} s] ${what}`);
}

function fatal(what) {
  console.log('FAIL  ' + what);
  failures.push(what);
  cleanup();
  finish();
}

function cleanup() {
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
}
process.on('exit', cleanup);
// the whole test is bounded; ctest's TIMEOUT is the backstop
setTimeout(() => fatal('the test did not finish within 100 s'), 100000).unref();

let playwright;
try {
  playwright = require(path.resolve(TOOLS, 'node_modules', 'playwright-core'));
} catch (e) {
  fatal(`playwright-core is not installed in ${TOOLS}/node_modules (run tools/install-deps.sh)`);
}
if (!fs.existsSync(CHROMIUM)) fatal(`${CHROMIUM} not found: install Debian's chromium (tools/install-deps.sh)`);

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function spawnLogged(args, logName, env) {
  const out = fs.openSync(path.join(WORK, logName), 'a');
  const p = spawn(args[0], args.slice(1), { stdio: ['ignore', out, out], env: env || process.env });
  fs.closeSync(out);
  procs.push(p);
  return p;
}

async function waitFor(pred, what, ms) {
  const t = Date.now();
  while (Date.now() - t < ms) {
    const v = await pred();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  fatal(`timed out after ${ms / 1000} s waiting for ${what}`);
  return null;
}

const readLog = (n) => { try { return fs.readFileSync(path.join(WORK, n), 'utf8'); } catch (e) { return ''; } };

async function http(port, method, url, { body, key, headers } = {}) {
  const h = Object.assign({}, headers);
  if (key) h.Authorization = 'Bearer ' + key;
  if (body) h['Content-Type'] = 'application/json';
  const r = await fetch(`http://127.0.0.1:${port}${url}`, { method, headers: h, body: body && JSON.stringify(body) });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

async function main() {
  fs.rmSync(WORK, { recursive: true, force: true });
  fs.mkdirSync(path.join(WORK, 'home'), { recursive: true, mode: 0o700 });
  const state = path.join(WORK, 'state');
  fs.mkdirSync(state, { mode: 0o700 });
  const env = Object.assign({}, process.env, { HOME: path.join(WORK, 'home') });
  delete env.DELTAFIN_API_KEY;
  delete env.DELTAFIN_JOIN_TOKEN;

  // the coordinator: serve --cluster, waiting for three nodes before it listens
  const cport = await freePort();
  execFileSync(EXE, ['cluster', 'init', '--state-dir', state], { env, stdio: 'ignore' });
  const serve = spawnLogged([EXE, 'serve', '--model', MODEL, '--draft', DRAFT, '--port', '0',
                             '--api-key', KEY, '--cluster', '--cluster-bind', '127.0.0.1',
                             '--cluster-port', String(cport), '--state-dir', state,
                             '--cluster-nodes', '3', '--cluster-wait', '60'], 'serve.log', env);
  const nodes = {};
  for (const name of ['node-a', 'node-b', 'node-c']) {
    const tok = execFileSync(EXE, ['cluster', 'token', '--state-dir', state, '--ttl', '10m'],
                             { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const tf = path.join(WORK, `token-${name}.txt`);
    fs.writeFileSync(tf, tok + '\n', { mode: 0o600 });
    const nstate = path.join(WORK, name);
    fs.mkdirSync(nstate, { mode: 0o700 });
    // 8 MiB each: 85 of the 192 pairs (96 KiB each) fit one node, so all three hold experts
    nodes[name] = spawnLogged([DFNODE, 'join', `127.0.0.1:${cport}`, '--state-dir', nstate,
                               '--memory', '8M', '--name', name, '--threads', '1',
                               '--token-file', tf, '--model-dir', MODEL], `${name}.log`, env);
  }
  serve.on('exit', (code, sig) => { if (!serve.expectedExit) fatal(`serve exited (${code}, ${sig}): see ${WORK}/serve.log`); });
  const m = await waitFor(() => readLog('serve.log').match(/listening on http:\/\/[^ ]*:(\d+) /),
                          'serve with three nodes (serve.log)', 60000);
  const port = Number(m[1]);
  log(`serve listens on port ${port}, cluster port ${cport}`);

  // ---- plain HTTP: static files without the key, the data endpoint with it -------------
  let r = await http(port, 'GET', '/');
  check(r.status === 200 && r.headers.get('content-type') === 'text/html; charset=utf-8' &&
        r.text.includes('<script src="/app.js"'), 'GET / without the key: the page (text/html)');
  const etag = r.headers.get('etag'), pageLen = Buffer.byteLength(r.text);
  check(/^"[0-9a-f]{16}"$/.test(etag || '') && r.headers.get('cache-control') === 'no-cache',
        `the page has a strong ETag (${etag}) and Cache-Control: no-cache`);
  r = await http(port, 'GET', '/', { headers: { 'If-None-Match': etag } });
  check(r.status === 304 && r.text === '', 'If-None-Match with its ETag: 304, no body');
  r = await http(port, 'HEAD', '/');
  check(r.status === 200 && r.text === '' && r.headers.get('etag') === etag &&
        Number(r.headers.get('content-length')) === pageLen,
        `HEAD /: 200, the ETag and Content-Length (${r.headers.get('content-length')}), no body`);
  r = await http(port, 'GET', '/app.js');
  check(r.status === 200 && r.headers.get('content-type') === 'text/javascript; charset=utf-8', 'GET /app.js: text/javascript');
  r = await http(port, 'GET', '/app.css');
  check(r.status === 200 && r.headers.get('content-type') === 'text/css; charset=utf-8', 'GET /app.css: text/css');
  r = await http(port, 'GET', '/v1/cluster');
  check(r.status === 401, '/v1/cluster without the key: 401');
  r = await http(port, 'GET', '/app.jsx');
  check(r.status === 404 && JSON.parse(r.text).error.code === 'unknown_url', 'an unknown URL: the 404 JSON');
  r = await http(port, 'GET', '/v1/cluster', { key: KEY });
  const doc = JSON.parse(r.text);
  check(r.status === 200 && doc.mode === 'cluster' && doc.nodes.length === 3 &&
        doc.nodes.every((n) => n.health === 'ready') && doc.placement.length === 6 &&
        doc.placement.every((row) => row && row.length === 32) && doc.heat.length === 6,
        '/v1/cluster with the key: cluster mode, 3 ready nodes, a 6 x 32 placement and heat grid');

  // the reference: the same request through the API (not streamed)
  const messages = [{ role: 'system', content: SYSTEM }, { role: 'user', content: PROMPT }];
  r = await http(port, 'POST', '/v1/chat/completions', { key: KEY, body: {
    model: NAME, messages, temperature: 0, max_tokens: MAX_TOKENS } });
  const want = JSON.parse(r.text).choices[0].message.content;
  check(r.status === 200 && want.length > 0, `the API's answer (${JSON.stringify(want)})`);
  r = await http(port, 'GET', '/v1/models', { key: KEY });
  const ctxLen = JSON.parse(r.text).data[0].max_model_len;
  const defaultMax = Math.min(4096, Math.floor(ctxLen / 2));
  // prompt texts by their length in tokens: ~7 tokens a sentence (checked below)
  const sentences = (n) => 'The committee reported that the new school '.repeat(n).trim();

  // ---- the browser ----------------------------------------------------------------------
  const browser = await playwright.chromium.launch({ executablePath: CHROMIUM, headless: true, env,
                                                     timeout: 30000 });
  try {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await ctx.newPage();
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    // the browser logs the 401s before the key and the 400s of the context checks
    page.on('console', (msg) => { if (msg.type() === 'error' && !/status of 40[01]/.test(msg.text())) pageErrors.push(msg.text()); });
    const requests = []; // every request the page makes: [path, JSON body]
    page.on('request', (q) => requests.push([new URL(q.url()).pathname, q.postData()]));
    const clusterPolls = () => requests.filter(([u]) => u === '/v1/cluster').length;
    const chatBodies = () => requests.filter(([u]) => u === '/v1/chat/completions').map(([, b]) => JSON.parse(b));
    page.setDefaultTimeout(20000);
    await page.goto(`http://127.0.0.1:${port}/`);
    log('page loaded');

    await page.waitForSelector('#key-dialog[open]');
    check(true, 'the page asks for the API key');
    // a key fetch() cannot send (not Latin-1): refused by the dialog, which stays open
    await page.fill('#key-input', 'ключ');
    await page.click('#key-save');
    const keyErr = await page.textContent('#key-error');
    check(!!(await page.$('#key-dialog[open]')) && /ASCII/.test(keyErr) &&
          (await page.textContent('#model-name')) !== 'server unreachable',
          `a non-ASCII key is refused and the dialog stays open (${keyErr})`);
    // ... and one stored by an older page is ignored
    await page.evaluate(() => localStorage.setItem('deltafin.apiKey', 'ключ'));
    await page.reload();
    await page.waitForSelector('#key-dialog[open]');
    await page.waitForFunction(() => document.getElementById('model-name').textContent === 'API key needed');
    check((await page.evaluate(() => localStorage.getItem('deltafin.apiKey'))) === null,
          'a stored non-ASCII key is ignored (and removed): the page asks for the key');
    // a message sent before the key is kept in the box, and the key is asked for again
    await page.keyboard.press('Escape');
    await page.waitForFunction(() => !document.getElementById('key-dialog').open);
    await page.fill('#prompt', 'sent before the key');
    await page.click('#send');
    await page.waitForSelector('#key-dialog[open]');
    check((await page.inputValue('#prompt')) === 'sent before the key' && (await page.$$('.msg')).length === 0,
          'Send before the key: the dialog comes back and the message stays in the box');
    await page.fill('#key-input', KEY);
    await page.click('#key-save');
    await page.waitForSelector('body[data-ready="1"]');
    check((await page.textContent('#model-name')) === NAME, 'with the key the page names the served model');

    await page.fill('#system', SYSTEM);
    await page.fill('#temperature', '0');
    await page.fill('#max-tokens', String(MAX_TOKENS));
    await page.fill('#prompt', PROMPT);
    // record the answer's length at every change, to see it arrive in pieces
    await page.evaluate(() => {
      window.dfLens = [];
      new MutationObserver(() => {
        const c = document.querySelector('.msg.assistant:last-of-type .content');
        if (c) window.dfLens.push(c.textContent.length);
      }).observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true });
    });
    await page.click('#send');
    const answer = await page.waitForSelector('.msg.assistant[data-state="done"], .msg.assistant[data-state="error"]',
                                              { timeout: 60000 });
    const got = await answer.$eval('.content', (e) => e.textContent);
    const stats = await answer.$eval('.stats', (e) => e.textContent);
    const errText = await answer.$eval('.error', (e) => e.textContent);
    check(got === want, `the streamed answer in the page equals the API's (${JSON.stringify(got)})${errText ? ': ' + errText : ''}`);
    const lens = await page.evaluate(() => window.dfLens);
    const pieces = new Set(lens.filter((n) => n > 0)).size;
    check(pieces >= 2, `the answer arrived in pieces (${pieces} lengths seen)`);
    check(/^\d+ tokens · [\d.]+ tok\/s · first token \d+ ms · draft acceptance \d+% \(\d+\/\d+\)/.test(stats),
          `the answer shows tokens/s and the draft's acceptance (${stats})`);
    await page.screenshot({ path: path.join(WORK, 'chat.png'), fullPage: true });

    // kept in the browser: a reload shows the conversation, and asks for no key
    await page.reload();
    await page.waitForSelector('body[data-ready="1"]');
    const kept = await page.$$eval('.msg', (els) => els.map((e) => e.querySelector('.content').textContent));
    check(kept.length === 2 && kept[0] === PROMPT && kept[1] === want && !(await page.$('#key-dialog[open]')),
          'after a reload the conversation is still there (localStorage) and the key is not asked again');

    // Stop: a long answer ends when asked, and the page can send again
    await page.fill('#max-tokens', '400');
    await page.fill('#prompt', 'Tell me about the city');
    await page.click('#send');
    await page.waitForFunction(() => {
      const c = document.querySelector('.msg.assistant:last-of-type .content');
      return c && c.textContent.length > 0;
    });
    await page.click('#stop');
    await page.waitForSelector('.msg.assistant:last-of-type[data-state="stopped"]', { timeout: 10000 });
    check(!(await page.$eval('#send', (b) => b.disabled)), 'Stop ends a streaming answer and Send is enabled again');

    // ---- the context ----------------------------------------------------------------------
    // a prompt longer than the context: refused (400), the turn is not kept, its text is back
    // in the box; an empty max_tokens field sends half the context
    await page.click('#new-chat');
    await page.fill('#max-tokens', '');
    const long = sentences(Math.ceil(ctxLen / 7) + 5);
    await page.fill('#prompt', long);
    let nChat = chatBodies().length;
    await page.click('#send');
    await page.waitForFunction(() => document.getElementById('chat-status').textContent.startsWith('Not sent'));
    let sent = chatBodies().slice(nChat);
    const why = await page.textContent('#chat-status');
    check(sent.length === 1 && sent[0].max_tokens === defaultMax,
          `an empty max_tokens field sends ${defaultMax}, half the context of ${ctxLen} (${sent.map((b) => b.max_tokens)})`);
    check((await page.inputValue('#prompt')) === long && (await page.$$('.msg')).length === 0 && /context/.test(why),
          `a prompt too long for the context: not kept in the conversation, its text back in the box (${why})`);
    // a conversation that outgrows the context: the oldest turn is left out, the turn is sent
    await page.fill('#max-tokens', '8');
    const first = sentences(Math.floor(ctxLen * 0.7 / 7));
    await page.fill('#prompt', first);
    await page.click('#send');
    await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 30000 });
    const second = sentences(Math.floor(ctxLen * 0.4 / 7));
    await page.fill('#prompt', second);
    nChat = chatBodies().length;
    await page.click('#send');
    await page.waitForSelector('.msg.assistant:last-of-type[data-state="done"]', { timeout: 30000 });
    sent = chatBodies().slice(nChat).map((b) => b.messages.filter((m) => m.role !== 'system'));
    const last = sent.length ? sent[sent.length - 1] : [];
    const faded = await page.$$eval('.msg', (els) => els.map((e) => e.classList.contains('dropped')));
    const note = await page.textContent('#chat-status');
    await page.screenshot({ path: path.join(WORK, 'context.png') });
    check(sent.length === 2 && sent[0].length === 3 && last.length === 1 && last[0].content === second &&
          faded.join() === 'true,true,false,false' && /left out/.test(note),
          `a full context: the oldest turn is left out (shown faded) and the new turn is answered (${sent.length} requests; ${note})`);

    // ---- the dashboard ------------------------------------------------------------------
    check(clusterPolls() === 0, `no /v1/cluster request while the chat is shown (${clusterPolls()})`);
    await page.click('#tab-cluster');
    const readyRows = () => page.$$eval('#nodes tr[data-health="ready"]', (t) => t.map((e) => e.dataset.name).sort().join(','));
    await waitFor(async () => (await readyRows()) === 'node-a,node-b,node-c', 'the dashboard to list 3 ready nodes', 15000);
    check(true, 'the dashboard lists node-a, node-b and node-c, ready');
    const mode = await page.textContent('#c-mode');
    const heat = await page.textContent('#heat-max');
    const grid = await page.$eval('#placement', (c) => [c.width, c.height]);
    // the RTT appears with the first PING's answer (the coordinator pings every 2 s)
    const nodeRow = () => page.$eval('#nodes tr[data-name="node-a"]', (tr) => [...tr.cells].map((c) => c.textContent));
    await waitFor(async () => /ms$/.test((await nodeRow())[3]), "node-a's measured RTT on the dashboard", 8000);
    const row = await nodeRow();
    check(mode === 'cluster' && /^max [1-9]\d* rows/.test(heat) && grid[0] > 0 && grid[1] > 0,
          `cluster mode with the placement grid (${grid.join('x')} px) and the heat map (${heat})`);
    check(/^[0-9a-f]{16}$/.test(row[1]) && /ms$/.test(row[3]) && /MiB/.test(row[4]) && Number(row[6]) > 0,
          `a node's row has its key fingerprint, RTT, budget and experts (${row.join(' | ')})`);
    await page.screenshot({ path: path.join(WORK, 'cluster-3.png'), fullPage: true });

    const tKill = Date.now();
    nodes['node-b'].kill('SIGKILL');
    await waitFor(async () => (await readyRows()) === 'node-a,node-c' &&
                  (await page.$('#nodes tr[data-name="node-b"][data-health="dropped"]')),
                  'the dashboard to show 2 ready nodes and node-b dropped after kill -9', 15000);
    const dt = (Date.now() - tKill) / 1000;
    check(dt < 15, `after kill -9 of node-b the dashboard shows 2 ready nodes in ${dt.toFixed(1)} s (bound: 15 s)`);
    check((await page.textContent('#node-count')).startsWith('2 /'), 'the node count says 2 ready');
    await page.screenshot({ path: path.join(WORK, 'cluster-2.png'), fullPage: true });
    // back on the chat, the polling stops (it runs every second while the dashboard is shown)
    await page.click('#tab-chat');
    await new Promise((res) => setTimeout(res, 200)); // one answer may still be on its way
    const polls = clusterPolls();
    await new Promise((res) => setTimeout(res, 1200)); // more than one period
    check(clusterPolls() === polls, `no /v1/cluster request after going back to the chat (${clusterPolls() - polls})`);
    check(pageErrors.length === 0, `no script errors in the page (${pageErrors.join('; ')})`);
  } finally {
    await browser.close();
  }

  serve.expectedExit = true;
  serve.kill('SIGTERM');
  const rc = await new Promise((res) => {
    if (serve.exitCode !== null) res(serve.exitCode);
    else serve.on('exit', (code) => res(code));
  });
  check(rc === 0, `serve exits 0 on SIGTERM (${rc})`);
  cleanup();
  log(`done; screenshots and logs in ${WORK}`);
  finish();
}

main().catch((e) => fatal(String(e && e.stack ? e.stack : e)));
