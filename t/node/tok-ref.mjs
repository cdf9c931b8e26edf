// tok-ref.mjs: the reference side of pagedllm's tokenizer tests.
// Runs @huggingface/tokenizers (and @huggingface/jinja for --chat) over
// the same JSON-lines input that pagedllm-tokenize reads, printing one
// JSON value per line, so the test can compare the two outputs exactly.
//
//   node tok-ref.mjs --tokenizer tokenizer.json [--config cfg.json]
//                    [--decode] [--skip-special] [--no-special]
//                    [--no-parse-special]                  < lines
//   node tok-ref.mjs --chat tokenizer_config.json         < conversations
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : null;
};
const flag = (name) => args.includes(name);
const lines = readFileSync(0, "utf8").split("\n").filter((l) => l.length);
const out = [];

if (opt("--chat")) {
  const cfg = JSON.parse(readFileSync(opt("--chat"), "utf8"));
  const tokenName = (t) => (t && typeof t === "object" ? t.content : t);
  const template = new Template(cfg.chat_template);
  for (const line of lines) {
    const conv = JSON.parse(line);
    const messages = Array.isArray(conv) ? conv : conv.messages;
    try {
      out.push(JSON.stringify(template.render({
        ...(Array.isArray(conv) ? {} : conv),
        messages,
        add_generation_prompt: !Array.isArray(conv) && !!conv.add_generation_prompt,
        bos_token: tokenName(cfg.bos_token) ?? "",
        eos_token: tokenName(cfg.eos_token) ?? "",
        unk_token: tokenName(cfg.unk_token) ?? "",
        pad_token: tokenName(cfg.pad_token) ?? "",
      })));
    } catch (e) {
      out.push("null");
    }
  }
} else {
  const json = JSON.parse(readFileSync(opt("--tokenizer"), "utf8"));
  const config = opt("--config")
    ? JSON.parse(readFileSync(opt("--config"), "utf8")) : {};
  const tok = new Tokenizer(json, config);
  if (flag("--no-parse-special")) {
    // Special tokens in the text stay plain text (Hugging Face's
    // split_special_tokens): only non-special added tokens are matched,
    // while the post-processor still adds BOS/EOS.
    const Splitter = tok.splitter_unnormalized.constructor;
    tok.splitter_unnormalized = new Splitter(json.added_tokens
      .filter((t) => !t.special).map((t) => t.content));
    for (const t of json.added_tokens) {
      if (t.special) tok.added_tokens_map.delete(t.content);
    }
  }
  for (const line of lines) {
    const v = JSON.parse(line);
    if (flag("--decode")) {
      out.push(JSON.stringify(v.length === 0 ? "" : tok.decode(v, {
        skip_special_tokens: flag("--skip-special"),
        clean_up_tokenization_spaces: false,
      })));
    } else {
      out.push(JSON.stringify(tok.encode(v, {
        add_special_tokens: !flag("--no-special"),
      }).ids));
    }
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
