#!/usr/bin/env node
// `deltafin serve` driven by the official `openai` npm client (tools/package.json): chat and
// completions, streaming and not, stream_options.include_usage, stop, seed reproducibility,
// models.list and error objects — every text asserted equal to `deltafin run` with the same
// settings.
//
// usage: node server_openai.js DELTAFIN MODEL_DIR TOOLS_DIR
// Exits 77 (ctest: skipped) when the openai package is not installed (tools/install-deps.sh).
'use strict';
const path = require('path');
const { openaiClass, check, finish, startServer } = require('./server_util.js');
const { execFile } = require('child_process');

const [EXE, MODEL, TOOLS] = process.argv.slice(2);
const NAME = path.basename(MODEL.replace(/\/+$/, ''));
const KEY = 'test-key-123';

const OpenAI = openaiClass(TOOLS);


// `deltafin run` prints the text and a newline.
function run(prompt, { chat = false, maxNew = 16, temperature = 0, topP = 1, topK = 0, seed = 0,
                       ignoreEos = false } = {}) {
  const args = ['run', '--model', MODEL, '--prompt', prompt, '--max-new', String(maxNew),
                '--temperature', String(temperature), '--top-p', String(topP), '--top-k',
                String(topK), '--seed', String(seed), '--no-draft'];
  if (chat) args.push('--chat');
  if (ignoreEos) args.push('--ignore-eos');
  return new Promise((resolve, reject) => {
    execFile(EXE, args, { encoding: 'utf8', maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`deltafin run: ${stderr}`));
      else resolve(stdout.replace(/\n$/, ''));
    });
  });
}


async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

async function main() {
  const P = 'Tell me a story about a fox';
  // references first (model loading dominates `deltafin run`); they run while the server starts
  const refs = {
    chatGreedy: run(P, { chat: true, maxNew: 24, ignoreEos: true }),
    chatSeeded: run(P, { chat: true, maxNew: 20, temperature: 1.0, seed: 1234 }),
    cmplSampled: run('Once upon a time', { maxNew: 18, temperature: 0.8, topP: 0.95, seed: 7 }),
    cmplGreedy: run('In the beginning', { maxNew: 30, ignoreEos: true }),
  };
  const srv = await startServer(EXE, ['--model', MODEL, '--quiet', '--api-key', KEY]);
  const client = new OpenAI({ apiKey: KEY, baseURL: `http://127.0.0.1:${srv.port}/v1`, maxRetries: 0,
                              timeout: 120000 });
  try {
    const models = await client.models.list();
    const ids = [];
    for await (const m of models) ids.push(m.id);
    check(ids.length === 1 && ids[0] === NAME, 'models.list() gives the served model');

    // chat, not streamed, greedy
    const want = await refs.chatGreedy;
    let r = await client.chat.completions.create({
      model: NAME, messages: [{ role: 'user', content: P }], max_tokens: 24, temperature: 0,
      ignore_eos: true });
    check(r.object === 'chat.completion' && r.choices.length === 1 &&
          r.choices[0].message.role === 'assistant' && r.choices[0].message.content === want &&
          r.choices[0].finish_reason === 'length', 'chat.completions.create equals `deltafin run --chat`');
    check(r.usage && r.usage.completion_tokens === 24 &&
          r.usage.total_tokens === r.usage.prompt_tokens + 24, 'chat usage');

    // chat, streamed, include_usage
    const chunks = await collect(await client.chat.completions.create({
      model: NAME, messages: [{ role: 'user', content: P }], max_tokens: 24, temperature: 0,
      ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
    const text = chunks.map((c) => (c.choices[0] && c.choices[0].delta.content) || '').join('');
    check(chunks[0].choices[0].delta.role === 'assistant', 'stream: the first chunk carries the role');
    check(text === want, 'stream: the deltas add up to `deltafin run --chat`');
    const last = chunks[chunks.length - 1];
    const fin = chunks.filter((c) => c.choices[0] && c.choices[0].finish_reason);
    check(fin.length === 1 && fin[0].choices[0].finish_reason === 'length', 'stream: one finish_reason');
    check(last.choices.length === 0 && last.usage && last.usage.completion_tokens === 24 &&
          last.usage.prompt_tokens === r.usage.prompt_tokens, 'stream: include_usage chunk last');

    // stop: a piece of the reference text
    const stop = want.slice(6, 9);
    r = await client.chat.completions.create({
      model: NAME, messages: [{ role: 'user', content: P }], max_tokens: 24, temperature: 0,
      ignore_eos: true, stop: [stop] });
    check(r.choices[0].message.content === want.slice(0, want.indexOf(stop)) &&
          r.choices[0].finish_reason === 'stop', `stop ${JSON.stringify(stop)}: text cut before it, finish_reason stop`);
    const sc = await collect(await client.chat.completions.create({
      model: NAME, messages: [{ role: 'user', content: P }], max_tokens: 24, temperature: 0,
      ignore_eos: true, stop, stream: true }));
    const stext = sc.map((c) => (c.choices[0] && c.choices[0].delta.content) || '').join('');
    check(stext === want.slice(0, want.indexOf(stop)) && !stext.includes(stop), 'stop, streamed: never emitted');

    // seed reproducibility (sampling at temperature 1)
    const seeded = { model: NAME, messages: [{ role: 'user', content: P }], max_tokens: 20,
                     temperature: 1.0, top_p: 1, top_k: 0, seed: 1234 };
    const [a, b, c] = await Promise.all([
      client.chat.completions.create(seeded), client.chat.completions.create(seeded),
      client.chat.completions.create({ ...seeded, seed: 4321 })]);
    const wantSeeded = await refs.chatSeeded;
    check(a.choices[0].message.content === b.choices[0].message.content,
          'same seed, same text (two concurrent requests)');
    check(a.choices[0].message.content === wantSeeded, 'seeded sampling equals `deltafin run --seed`');
    check(c.choices[0].message.content !== a.choices[0].message.content, 'another seed, another text');

    // completions, not streamed and streamed
    const wantC = await refs.cmplSampled;
    const rc = await client.completions.create({ model: NAME, prompt: 'Once upon a time', max_tokens: 18,
                                                 temperature: 0.8, top_p: 0.95, top_k: 0, seed: 7 });
    check(rc.object === 'text_completion' && rc.choices[0].text === wantC,
          'completions.create (sampled) equals `deltafin run`');
    const wantG = await refs.cmplGreedy;
    const cc = await collect(await client.completions.create({
      model: NAME, prompt: 'In the beginning', max_tokens: 30, temperature: 0, ignore_eos: true,
      stream: true, stream_options: { include_usage: true } }));
    const ctext = cc.map((x) => (x.choices[0] && x.choices[0].text) || '').join('');
    check(ctext === wantG, 'completions stream equals `deltafin run`');
    const cl = cc[cc.length - 1];
    check(cl.usage && cl.usage.completion_tokens === 30, 'completions stream: usage chunk');

    // errors surface as the client's error classes with OpenAI's fields
    try {
      await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] });
      check(false, 'unknown model is an error');
    } catch (e) {
      check(e.status === 404 && e.code === 'model_not_found' && e.param === 'model', 'unknown model: 404 NotFoundError');
    }
    try {
      await client.chat.completions.create({ model: NAME, messages: [{ role: 'user', content: 'x' }], n: 2 });
      check(false, 'n = 2 is an error');
    } catch (e) {
      check(e.status === 400 && e.param === 'n' && /n = 1/.test(e.message), 'n = 2: 400 BadRequestError naming n');
    }
    try {
      await client.chat.completions.create({ model: NAME, messages: [{ role: 'user', content: 'x' }], frobnicate: 1 });
      check(false, 'an unknown field is an error');
    } catch (e) {
      check(e.status === 400 && e.param === 'frobnicate', 'unknown field: 400 naming it');
    }
    const bad = new OpenAI({ apiKey: 'wrong', baseURL: `http://127.0.0.1:${srv.port}/v1`, maxRetries: 0 });
    try {
      await bad.models.list();
      check(false, 'a wrong key is an error');
    } catch (e) {
      check(e.status === 401 && e.code === 'invalid_api_key', 'wrong key: 401 AuthenticationError');
    }
  } finally {
    srv.kill('SIGTERM');
  }
  const code = await new Promise((resolve) => srv.on('exit', (c) => resolve(c)));
  check(code === 0, `server exits cleanly on SIGTERM (${code})`);
  finish();
}

main().catch((e) => {
  console.log('FAIL  ' + (e && e.stack ? e.stack : e));
  process.exit(1);
});
