// stream-shapes-client.mjs: the official openai npm client on the answers
// that are made differently streamed and not, for t/74-stream-shapes.t.
// A beam search on /v1/completions and /v1/chat/completions, whole and
// streamed (the chunks iterated as an application does), and a forced
// tool call cut by max_tokens, whole and streamed.  Prints one JSON
// object: per request the choices' texts (or calls) and finish_reasons,
// and for the streams how many chunks came and their usage.
//
//   node t/node/stream-shapes-client.mjs NODE_DIR BASE_URL

import { createRequire } from 'module';

const [nodeDir, baseURL] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const OpenAI = require('openai');

const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const out = {};

// a stream's chunks into each choice's text, calls and finish_reason
async function collect(stream) {
  const got = { chunks: 0, choices: [], usage: null };
  for await (const chunk of stream) {
    got.chunks++;
    got.usage = chunk.usage ?? got.usage;
    for (const c of chunk.choices) {
      const s = (got.choices[c.index] ??= { text: '', finish: null });
      s.text += c.text ?? c.delta?.content ?? '';
      for (const d of c.delta?.tool_calls ?? []) {
        s.calls ??= [];
        s.calls[d.index] ??= { name: d.function.name, arguments: '' };
        s.calls[d.index].arguments += d.function.arguments ?? '';
      }
      s.finish = c.finish_reason ?? s.finish;
    }
  }
  return got;
}

const beam = { model, use_beam_search: true, n: 2, max_tokens: 12,
               ignore_eos: true };
const usage = { stream: true, stream_options: { include_usage: true } };
const completion = { ...beam, best_of: 4, prompt: 'Search wide' };
const chat = { ...beam,
               messages: [{ role: 'user', content: 'Search wide' }] };

out.completions = (await client.completions.create(completion)).choices
  .map((c) => ({ text: c.text, finish: c.finish_reason }));
out.completions_stream = await collect(
  await client.completions.create({ ...completion, ...usage }));
out.chat = (await client.chat.completions.create(chat)).choices
  .map((c) => ({ text: c.message.content, finish: c.finish_reason }));
out.chat_stream = await collect(
  await client.chat.completions.create({ ...chat, ...usage }));

const cut = {
  model, messages: [{ role: 'user', content: 'Weather in Oslo?' }],
  tool_choice: 'required', max_tokens: 80, seed: 28,
  tools: [{ type: 'function', function: {
    name: 'get_weather', parameters: { type: 'object',
      properties: { city: { type: 'string', maxLength: 8 } },
      required: ['city'], additionalProperties: false } } }],
};
const [whole] = (await client.chat.completions.create(cut)).choices;
out.tools = { content: whole.message.content,
              calls: (whole.message.tool_calls ?? []).map((c) => ({
                name: c.function.name, arguments: c.function.arguments })),
              finish: whole.finish_reason };
const [streamed] = (await collect(
  await client.chat.completions.create({ ...cut, stream: true }))).choices;
out.tools_stream = { content: streamed.text === '' ? null : streamed.text,
                     calls: streamed.calls ?? [], finish: streamed.finish };

process.stdout.write(JSON.stringify(out) + '\n');
