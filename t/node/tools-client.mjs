// tools-client.mjs: tool calling through the official openai npm client,
// for t/62-tools.t.  Against one server (one chat template, so one
// tool-call format), it asks for calls with tool_choice "required" and a
// named function, streamed and not, parallel or not, checks every call
// (names, ids, the arguments valid JSON that ajv validates against the
// function's parameters, the streamed deltas in OpenAI's order, the
// arguments in as many fragments as they were written in), then
// "auto" with the answer's text fixed by guided_regex in the template's
// format (well formed: parsed into calls; malformed: left as content),
// a conversation that sends calls and their results back, and the 400s.
// Prints one JSON object: counts and the problems found.
//
//   node t/node/tools-client.mjs NODE_DIR BASE_URL FORMAT SPECIAL
//
// SPECIAL: the text of one of the tokenizer's special tokens.

import { createRequire } from 'module';

const [nodeDir, baseURL, format, special] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const OpenAI = require('openai');
const Ajv = require('ajv');

const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const ajv = new Ajv({ strict: false });

const tools = [
  { type: 'function', function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: {
      city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
      unit: { type: 'string', enum: ['c', 'f'] },
      days: { type: 'integer' } },
      required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: {
    name: 'set_alarm', description: 'An alarm', strict: true,
    parameters: { type: 'object', properties: {
      at: { $ref: '#/$defs/time' },
      label: { type: 'string', maxLength: 6 },
      repeat: { type: 'boolean' } },
      required: ['at'],
      $defs: { time: { type: 'object', properties: {
        h: { type: 'integer' }, m: { type: 'integer' } },
        required: ['h', 'm'] } } } } },
  { type: 'function', function: { name: 'ping' } },
];
const validate = Object.fromEntries(tools.map((t) => [t.function.name,
  ajv.compile(t.function.parameters ?? { type: 'object',
                                         additionalProperties: false })]));
const messages = [{ role: 'user', content: 'What should I do?' }];
const idRe = format === 'mistral' ? /^[A-Za-z0-9]{9}$/
                                  : /^call_[A-Za-z0-9]{24}$/;

const out = { model, checked: 0, calls: 0, cut: 0, parallel_max: 0,
              fragments_max: 0, problems: [] };
const problem = (what, detail) =>
  out.problems.push(`${what}: ${JSON.stringify(detail).slice(0, 400)}`);

// one choice's message and finish_reason, with what the request allowed
function checkChoice(what, msg, finish, allowed, parallel) {
  out.checked++;
  if (finish === 'length') { out.cut++; return; }
  if (finish !== 'tool_calls') return problem(`${what} finish`, finish);
  const calls = msg.tool_calls ?? [];
  if (calls.length === 0) return problem(`${what} no calls`, msg);
  if (!parallel && calls.length > 1) problem(`${what} parallel`, calls);
  if (msg.content !== null && msg.content !== undefined && msg.content !== '')
    problem(`${what} content`, msg.content);
  out.parallel_max = Math.max(out.parallel_max, calls.length);
  for (const c of calls) {
    out.calls++;
    if (!idRe.test(c.id ?? '') || c.type !== 'function')
      problem(`${what} id/type`, c);
    if (!allowed.includes(c.function?.name))
      problem(`${what} name`, c.function);
    let args;
    try { args = JSON.parse(c.function.arguments); } catch (e) {
      problem(`${what} arguments not JSON`, c.function); continue;
    }
    if (!validate[c.function.name]?.(args))
      problem(`${what} arguments invalid`, { c, errors: validate[c.function.name]?.errors });
  }
}

// a stream's chunks into each choice's message, checking the deltas
async function streamed(what, req) {
  const ch = {};
  for await (const chunk of await client.chat.completions.create(
    { ...req, stream: true })) {
    for (const c of chunk.choices) {
      const s = (ch[c.index] ??= { content: '', tool_calls: [], finish: null });
      if (c.delta.content) s.content += c.delta.content;
      for (const d of c.delta.tool_calls ?? []) {
        const call = s.tool_calls[d.index];
        if (call === undefined) {
          if (d.index !== s.tool_calls.length || !d.id || d.type !== 'function'
              || !d.function?.name || d.function.arguments !== '')
            problem(`${what} first delta`, d);
          s.tool_calls[d.index] = { id: d.id, type: d.type,
            function: { name: d.function?.name, arguments: '' } };
          Object.defineProperty(s.tool_calls[d.index], 'fragments',
                                { value: 0, writable: true });
        } else {
          if (d.id || d.function?.name) problem(`${what} later delta`, d);
          call.function.arguments += d.function?.arguments ?? '';
          call.fragments = (call.fragments ?? 0) + 1;
          out.fragments_max = Math.max(out.fragments_max, call.fragments);
        }
      }
      if (c.finish_reason) s.finish = c.finish_reason;
    }
  }
  return Object.values(ch).map((s) => ({ finish: s.finish,
    msg: { content: s.content === '' ? null : s.content,
           tool_calls: s.tool_calls.length ? s.tool_calls : undefined } }));
}

const all = tools.map((t) => t.function.name);
const base = { model, messages, tools, max_tokens: 400 };
const named = { type: 'function', function: { name: 'set_alarm' } };
let seed = 1, first = null;

for (const stream of [false, true]) {
  for (const [what, extra, allowed, parallel] of [
    ['required', { tool_choice: 'required', parallel_tool_calls: false },
     all, false],
    ['required parallel', { tool_choice: 'required', min_tokens: 100 },
     all, true],
    ['named', { tool_choice: named }, ['set_alarm'], false],
  ]) {
    for (let k = 0; k < 3; k++) {
      const req = { ...base, ...extra, n: 2, seed: seed++ };
      const name = `${what}${stream ? ' streamed' : ''}`;
      const got = stream ? await streamed(name, req)
        : (await client.chat.completions.create(req)).choices
            .map((c) => ({ msg: c.message, finish: c.finish_reason }));
      if (got.length !== 2) problem(`${name} choices`, got.length);
      for (const g of got) {
        checkChoice(name, g.msg, g.finish, allowed, parallel);
        if (!first && g.finish === 'tool_calls' && g.msg.tool_calls.length === 1)
          first = g.msg.tool_calls;
      }
    }
  }
}

// auto: the text fixed by guided_regex, in the template's format or not
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const call = '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}';
const llama = '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "c"}}';
const written = {
  hermes: `I will check. <tool_call>\n${call}\n</tool_call>`,
  llama, mistral: `[${call}]`, json: `[${call}]`,
}[format];
const content = { hermes: 'I will check. ' }[format] ?? null;
const malformed = written.replace('get_weather', 'get_wether');
out.auto = {};
for (const stream of [false, true]) {
  for (const [what, text, choice] of [['well formed', written, 'auto'],
                                      ['malformed', malformed, 'auto'],
                                      ['none', written, 'none']]) {
    const req = { ...base, tool_choice: choice, guided_regex: esc(text),
                  max_tokens: 300, seed: seed++ };
    const name = `auto ${what}${stream ? ' streamed' : ''}`;
    const [g] = stream ? await streamed(name, req)
      : (await client.chat.completions.create(req)).choices
          .map((c) => ({ msg: c.message, finish: c.finish_reason }));
    out.auto[name] = { finish: g.finish, content: g.msg.content,
      calls: (g.msg.tool_calls ?? []).map((c) => [c.function.name,
                                                  JSON.parse(c.function.arguments)]) };
    if (what !== 'well formed'
        && (g.finish !== 'stop' || g.msg.content !== text || g.msg.tool_calls))
      problem(`${name}: not content`, g);
    if (what === 'well formed' && g.msg.content !== content)
      problem(`${name}: content`, g.msg.content);
  }
}

// the calls and their results sent back (the ids as given), then more
// calls
if (!first) problem('no single call to send back', null);
const history = [
  ...messages,
  { role: 'assistant', content: null, tool_calls: first ?? [] },
  ...(first ?? []).map((c) => ({ role: 'tool', tool_call_id: c.id,
                                  content: '{"ok": true, "temp": 21}' })),
];
for (const stream of [false, true]) {
  const req = { ...base, messages: history, tool_choice: 'required',
                parallel_tool_calls: false, seed: seed++ };
  const got = stream ? await streamed('multi-turn streamed', req)
    : (await client.chat.completions.create(req)).choices
        .map((c) => ({ msg: c.message, finish: c.finish_reason }));
  for (const g of got) checkChoice('multi-turn', g.msg, g.finish, all, false);
}
const auto = await client.chat.completions.create({ ...base, messages: history,
                                                    max_tokens: 8 });
out.multi_turn_auto = auto.choices[0].finish_reason;

// a message copied back as clients do, tool_calls null
const copied = await client.chat.completions.create({ ...base, max_tokens: 2,
  messages: [...messages, { role: 'assistant', content: 'Hi.', tool_calls: null },
             { role: 'user', content: 'Again?' }] });
out.copied_back = copied.choices.length;

// the 400s: [what, request, the param named, a word of the message]
out.errors = {};
for (const [what, req, param, word] of [
  ['unknown named function', { tool_choice: { type: 'function',
      function: { name: 'nope' } } }, 'tool_choice', 'nope'],
  ['required without tools', { tools: undefined, tool_choice: 'required' },
   'tool_choice', 'tools'],
  ['tool of another type', { tools: [{ type: 'retrieval' }] }, 'tools', 'tools[0]'],
  ['function without a name', { tools: [{ type: 'function',
      function: { description: 'x' } }] }, 'tools', 'name'],
  ['a bad function name', { tools: [{ type: 'function',
      function: { name: 'a b' } }] }, 'tools', 'name'],
  ['a function named twice', { tools: [tools[2], tools[2]] }, 'tools', 'ping'],
  ['an unknown function field', { tools: [{ type: 'function',
      function: { name: 'f', returns: {} } }] }, 'tools', 'returns'],
  ['an unsupported keyword, required', { tool_choice: 'required',
      tools: [{ type: 'function', function: { name: 'f', parameters: {
        type: 'object', properties: { n: { type: 'integer', minimum: 1 } } } } }] },
   'tools', 'minimum'],
  ['an unsupported keyword, strict', { tools: [{ type: 'function',
      function: { name: 'f', strict: true, parameters: { type: 'object',
        properties: { s: { type: 'string', contentEncoding: 'base64' } } } } }] },
   'tools', 'contentEncoding'],
  ['parameters not of an object', { tools: [{ type: 'function', function: {
      name: 'f', parameters: { type: 'string' } } }] }, 'tools', 'parameters'],
  ['a bad tool_choice', { tool_choice: 'sometimes' }, 'tool_choice', 'required'],
  ['a special token in a description', { tools: [{ type: 'function',
      function: { name: 'f', description: `say ${special}` } }] }, 'tools',
   'special token'],
  ['required with response_format', { tool_choice: 'required',
      response_format: { type: 'json_object' } }, 'tool_choice', 'combined'],
  ['a tool message without tool_call_id', { messages: [...messages,
      { role: 'tool', content: 'x' }] }, 'messages', 'tool_call_id'],
  ['tool_calls with bad arguments', { messages: [...messages,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1',
        type: 'function', function: { name: 'ping', arguments: '{nope' } }] }] },
   'messages', 'arguments'],
]) {
  try {
    await client.chat.completions.create({ ...base, ...req });
    out.errors[what] = 'accepted';
  } catch (e) {
    const ok = e.status === 400 && e.param === param
      && String(e.message).includes(word);
    out.errors[what] = ok ? 'ok' : `${e.status} ${e.param}: ${e.message}`;
  }
}

process.stdout.write(JSON.stringify(out) + '\n');
