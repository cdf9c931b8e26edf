// vLLM's prompt_logprobs through the official openai npm client, which
// passes a field it does not know through to the server and hands back
// the answer's fields as they came: a completion (the list on each
// choice) and a chat completion (the list beside the choices), then a
// streamed completion with prompt_logprobs 2, which the server refuses.
// Prints one JSON object of what it got, for t/69-prompt-logprobs.t.
//
//   node t/node/prompt-logprobs-client.mjs NODE_DIR BASE_URL MODEL PROMPT

import { createRequire } from 'module';

const [nodeDir, baseURL, model, prompt] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const OpenAI = require('openai');

const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
const out = {};

out.completion = await client.completions.create({
    model, prompt, max_tokens: 2, temperature: 0, prompt_logprobs: 3,
});

out.chat = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: prompt }], max_tokens: 2,
    temperature: 0, prompt_logprobs: 1,
});

try {
    const s = await client.completions.create({
        model, prompt, max_tokens: 2, stream: true, prompt_logprobs: 2,
    });
    for await (const c of s) {
        out.stream_chunk = c;
    }
    out.stream_error = null;
} catch (e) {
    out.stream_error = { status: e.status, message: e.error?.message ?? null,
                         param: e.error?.param ?? null };
}

console.log(JSON.stringify(out));
