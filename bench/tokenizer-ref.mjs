// bench/tokenizer-ref.mjs: the JavaScript reference side of
// bench/tokenizer.sh.  Same corpus, same work as bench/tokenizer.c:
// encode every line (BOS template, special tokens parsed), best of ROUNDS
// passes, then decode the ids back.  Prints the same fields.
//
//   node bench/tokenizer-ref.mjs TOKENIZER_JSON CORPUS [ROUNDS]
import { readFileSync } from "node:fs";

const lib = new URL("../t/node/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs",
  import.meta.url);
const { Tokenizer } = await import(lib);
const [file, corpusFile, roundsArg] = process.argv.slice(2);
const rounds = Number(roundsArg ?? 3);
const lines = readFileSync(corpusFile, "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
const bytes = lines.reduce((s, l) => s + Buffer.byteLength(l, "utf8"), 0);

let t0 = performance.now();
const tok = new Tokenizer(JSON.parse(readFileSync(file, "utf8")), {});
const load = performance.now() - t0;
let enc = Infinity, dec = Infinity, ntok = 0;
for (let r = 0; r < rounds; r++) {
  const all = [];
  ntok = 0;
  t0 = performance.now();
  for (const l of lines) {
    const ids = tok.encode(l).ids;
    ntok += ids.length;
    all.push(ids);
  }
  enc = Math.min(enc, (performance.now() - t0) / 1e3);
  t0 = performance.now();
  for (const ids of all) {
    if (ids.length) tok.decode(ids, { clean_up_tokenization_spaces: false });
  }
  dec = Math.min(dec, (performance.now() - t0) / 1e3);
}
console.log(`impl=js load_ms=${load.toFixed(1)} strings=${lines.length} bytes=${bytes} ` +
  `tokens=${ntok} encode_MBps=${(bytes / enc / 1e6).toFixed(2)} ` +
  `encode_tokps=${(ntok / enc).toFixed(0)} decode_tokps=${(ntok / dec).toFixed(0)}`);
