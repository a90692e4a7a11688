#!/usr/bin/env node
// Tool calling through the official `openai` npm client (tools/package.json) against
// `deltafin serve` on the demo model (Qwen3's chat template): a two-round tool conversation
// with tool_choice naming a function, streamed and not — the arguments parse as JSON and follow
// the function's schema, the streamed deltas add up to the same call, the second round (the
// call and its result in `messages`) answers with content —, "required" with two tools, a call
// cut by max_tokens (finish_reason "length", no tool_calls, the text as content), and the 400
// for a tool_choice naming an unknown function.
//
// usage: node server_tools.js DELTAFIN MODEL_DIR TOOLS_DIR
// Exits 77 (ctest: skipped) when the openai package is not installed (tools/install-deps.sh).
'use strict';
const { openaiClass, check, finish, startServer } = require('./server_util.js');

const [EXE, MODEL, TOOLS] = process.argv.slice(2);

const OpenAI = openaiClass(TOOLS);



const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', maxLength: 24 },
        unit: { enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
};
const ADD = {
  type: 'function',
  function: {
    name: 'add',
    parameters: {
      type: 'object',
      properties: { a: { type: 'integer', minimum: 0, maximum: 999 }, b: { type: 'integer', minimum: 0, maximum: 999 } },
      required: ['a', 'b'],
    },
  },
};

function weatherArgsOk(s) {
  let a;
  try { a = JSON.parse(s); } catch (e) { return false; }
  return a && typeof a.city === 'string' && a.city.length <= 24 &&
         ['celsius', 'fahrenheit'].includes(a.unit) && Object.keys(a).length === 2;
}

async function main() {
  const srv = await startServer(EXE, ['--model', MODEL, '--model-name', 'demo', '--quiet', '--no-draft']);
  const client = new OpenAI({ apiKey: 'none', baseURL: `http://127.0.0.1:${srv.port}/v1`, maxRetries: 0 });
  try {
    const messages = [{ role: 'user', content: 'What is the weather like in Paris today?' }];
    const named = { type: 'function', function: { name: 'get_weather' } };
    // round 1, not streamed
    const r1 = await client.chat.completions.create({
      model: 'demo', messages, tools: [WEATHER, ADD], tool_choice: named, max_tokens: 80, temperature: 0,
    });
    const m1 = r1.choices[0].message;
    const call = (m1.tool_calls || [])[0];
    check(r1.choices[0].finish_reason === 'tool_calls' && m1.tool_calls.length === 1 &&
          call.type === 'function' && call.function.name === 'get_weather' &&
          /^call_[A-Za-z0-9]{24}$/.test(call.id),
          `named tool_choice: one call of get_weather, finish_reason tool_calls (${JSON.stringify(m1)})`);
    check(m1.content === null, 'content is null beside the call');
    check(weatherArgsOk(call.function.arguments),
          `the arguments parse and follow the schema: ${call.function.arguments}`);

    // round 1, streamed: the deltas add up to the same call
    const stream = await client.chat.completions.create({
      model: 'demo', messages, tools: [WEATHER, ADD], tool_choice: named, max_tokens: 80, stream: true, temperature: 0,
    });
    let name = '', args = '', id = '', finish = null, content = '';
    for await (const ch of stream) {
      const d = ch.choices[0].delta || {};
      for (const tc of d.tool_calls || []) {
        if (tc.id) id = tc.id;
        if (tc.function && tc.function.name) name += tc.function.name;
        if (tc.function && tc.function.arguments) args += tc.function.arguments;
      }
      if (d.content) content += d.content;
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
    check(finish === 'tool_calls' && name === 'get_weather' && args === call.function.arguments &&
          content === '' && /^call_/.test(id),
          `streamed: delta.tool_calls add up to the same call (${name} ${args}, ${finish})`);

    // round 2: the call and its result in the conversation; the model answers in text
    const messages2 = messages.concat([
      m1,
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21, "sky": "clear"}' },
    ]);
    const r2 = await client.chat.completions.create({
      model: 'demo', messages: messages2, tools: [WEATHER, ADD], tool_choice: 'none', max_tokens: 24, temperature: 0,
    });
    check(typeof r2.choices[0].message.content === 'string' && r2.choices[0].message.content.length > 0 &&
          !r2.choices[0].message.tool_calls && r2.usage.prompt_tokens > r1.usage.prompt_tokens,
          `round 2 (assistant tool_calls + tool result in messages): a text answer (${JSON.stringify(r2.choices[0].message.content)})`);
    const s2 = await client.chat.completions.create({
      model: 'demo', messages: messages2, tools: [WEATHER, ADD], tool_choice: 'none', max_tokens: 24, temperature: 0,
      stream: true,
    });
    let text2 = '';
    for await (const ch of s2) text2 += (ch.choices[0].delta || {}).content || '';
    check(text2 === r2.choices[0].message.content, 'round 2 streamed: the same text');
    check(r2.usage.prompt_tokens_details && r2.usage.prompt_tokens_details.cached_tokens > 0,
          `round 2 starts from the cached conversation (${JSON.stringify(r2.usage.prompt_tokens_details)})`);

    // "required" with two tools, sampled: always exactly one call of one of them
    let okReq = 0;
    for (let seed = 1; seed <= 4; seed++) {
      const r = await client.chat.completions.create({
        model: 'demo', messages: [{ role: 'user', content: 'Add 2 and 3, or tell me the weather.' }],
        tools: [WEATHER, ADD], tool_choice: 'required', max_tokens: 120, temperature: 1, seed,
      });
      const c = r.choices[0];
      const tc = (c.message.tool_calls || [])[0];
      let good = false;
      if (c.finish_reason === 'tool_calls' && c.message.tool_calls.length === 1) {
        if (tc.function.name === 'get_weather') good = weatherArgsOk(tc.function.arguments);
        else if (tc.function.name === 'add') {
          const a = JSON.parse(tc.function.arguments);
          good = Number.isInteger(a.a) && Number.isInteger(a.b) && a.a >= 0 && a.a <= 999 && a.b >= 0 && a.b <= 999;
        }
      } else if (c.finish_reason === 'length') {
        good = !c.message.tool_calls; // cut: never a half call
      }
      if (good) okReq++;
      else console.log('  required, seed ' + seed + ': ' + JSON.stringify(c));
    }
    check(okReq === 4, `tool_choice "required" (temperature 1, 4 seeds): a valid call of one of the tools each time`);

    // a call cut by max_tokens is not a call
    const cut = await client.chat.completions.create({
      model: 'demo', messages, tools: [WEATHER], tool_choice: named, max_tokens: 3,
    });
    const cm = cut.choices[0];
    check(cm.finish_reason === 'length' && !cm.message.tool_calls && typeof cm.message.content === 'string' &&
          cm.message.content.startsWith('<tool_call>'),
          `cut by max_tokens: finish_reason length, no tool_calls, the text as content (${JSON.stringify(cm.message)})`);

    // errors
    let err = null;
    try {
      await client.chat.completions.create({
        model: 'demo', messages, tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'nope' } },
      });
    } catch (e) { err = e; }
    check(err && err.status === 400 && /nope/.test(err.message), 'tool_choice naming an unknown function: 400');
    err = null;
    try {
      await client.chat.completions.create({
        model: 'demo', messages, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', pattern: 'x+' } } } } }],
        tool_choice: 'required',
      });
    } catch (e) { err = e; }
    check(err && err.status === 400 && /pattern/.test(err.message) && err.param === 'tools[0].function.parameters',
          `a schema keyword the recogniser lacks: 400 naming it (${err && err.message})`);
  } finally {
    srv.kill('SIGTERM');
  }
  finish();
}

main().catch((e) => { console.error(e); process.exit(1); });
