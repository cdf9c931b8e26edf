// The official openai npm client against our server: completions and chat
// completions, streamed and not, an error, the models list and retrieve,
// and a developer message.  Prints one JSON object of
// what it got, for t/16-chat.t to check.
//
//   node t/lib/openai-client.mjs NODE_DIR BASE_URL MODEL

import { createRequire } from 'module';

const [nodeDir, baseURL, model] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const OpenAI = require('openai');

const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
const out = {};
const chatMessages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Say something.' },
];

out.completion = await client.completions.create({
    model, prompt: 'Hello world', max_tokens: 8, temperature: 0, logprobs: 2,
});

let text = '', chunks = 0, finish = null;
for await (const c of await client.completions.create({
    model, prompt: 'Hello world', max_tokens: 8, temperature: 0, stream: true,
})) {
    chunks++;
    text += c.choices[0]?.text ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
}
out.completion_stream = { text, chunks, finish };

out.chat = await client.chat.completions.create({
    model, messages: chatMessages, max_completion_tokens: 8, temperature: 0,
    logprobs: true, top_logprobs: 2,
});

let role = null, content = '', usage = null;
finish = null;
for await (const c of await client.chat.completions.create({
    model, messages: chatMessages, max_tokens: 8, temperature: 0,
    stream: true, stream_options: { include_usage: true },
})) {
    const ch = c.choices[0];
    if (ch) {
        role = role ?? ch.delta.role ?? null;
        content += ch.delta.content ?? '';
        finish = ch.finish_reason ?? finish;
    }
    usage = c.usage ?? usage;
}
out.chat_stream = { role, content, finish, usage };

try {
    await client.chat.completions.create({
        model, messages: chatMessages, temperature: 7,
    });
    out.error = null;
} catch (e) {
    out.error = { status: e.status, param: e.param ?? e.error?.param ?? null,
                  type: e.type ?? e.error?.type ?? null };
}

const listed = [];
for await (const m of client.models.list()) {
    listed.push(m.id);
}
out.models = { listed, retrieved: (await client.models.retrieve(model)).id };

out.developer = await client.chat.completions.create({
    model, max_completion_tokens: 8, temperature: 0,
    messages: [{ role: 'developer', content: 'You are terse.' },
               chatMessages[1]],
});

console.log(JSON.stringify(out));
