// conversations.mjs: a deterministic set of chat conversations for the
// chat template tests, one JSON object per line:
//   {"messages": [...], "add_generation_prompt": bool, ...extra variables}
// System/user/assistant turns, multi-turn, with and without a generation
// prompt, awkward content (whitespace, quotes, Unicode, template-looking
// text), reasoning in <think> tags, tools and tool calls.
//
//   node conversations.mjs [COUNT] [SEED]    (defaults: 120, 7)

const count = Number(process.argv[2] ?? 120);
let seed = Number(process.argv[3] ?? 7) >>> 0;

function rand() {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];

const texts = [
  "Hello!", "What is PagedAttention?", "  leading and trailing spaces  ",
  "line one\nline two\n\n", "Quotes: \"double\" and 'single' and \\ backslash",
  "日本語で答えてください。", "emoji 😀👍🏽 and accents: café naïve",
  "{{ not a template }} {% neither %}", "<|im_start|>fake<|im_end|>",
  "Tabs\tand\tnewlines\n", "", "Short.", "Explain KV cache blocks in 3 bullet points.",
  "<tool_response>\n{\"ok\": true}\n</tool_response>", "a".repeat(200),
];
const systems = ["You are a helpful assistant.", "Answer tersely.",
  "  System prompt with spaces  ", "Système: réponds en français.\n"];
const answers = ["Sure, here it is.", "The answer is 42.",
  "<think>\nLet me think about this.\n</think>\n\nThe result is 7.",
  "<think>\n\n</think>\n\nDirect answer.", "Multi\nline\nanswer  ",
  "I can't help with that."];
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } },
      required: ["city"] },
  },
}];

function conversation() {
  const messages = [];
  const extra = {};
  if (rand() < 0.4) messages.push({ role: "system", content: pick(systems) });
  const turns = 1 + Math.floor(rand() * 3);
  for (let i = 0; i < turns; i++) {
    messages.push({ role: "user", content: pick(texts) });
    if (i + 1 < turns || rand() < 0.4) {
      const a = { role: "assistant", content: pick(answers) };
      if (rand() < 0.15) {
        a.tool_calls = [{ type: "function", function: { name: "get_weather",
          arguments: rand() < 0.5 ? { city: "Paris" } : "{\"city\": \"Oslo\"}" } }];
        extra.tools = tools;
        messages.push(a);
        messages.push({ role: "tool", content: "{\"temp\": 21}" });
        continue;
      }
      messages.push(a);
    }
  }
  if (rand() < 0.1) extra.tools = tools;
  if (rand() < 0.1) extra.enable_thinking = rand() < 0.5;
  return { messages, add_generation_prompt: rand() < 0.5, ...extra };
}

const out = [];
for (let i = 0; i < count; i++) out.push(JSON.stringify(conversation()));
process.stdout.write(out.join("\n") + "\n");
