// corpus.mjs: a deterministic corpus of varied strings for the tokenizer
// tests (prose, code, whitespace runs, digits, CJK, emoji, combining
// marks, special-token look-alikes and random mixtures), one JSON string
// per line.  Only characters assigned in Unicode 15.0 are used, so the
// Unicode tables of both sides agree on every one of them.
//
//   node corpus.mjs [COUNT] [SEED]    (defaults: 2400, 1)

const count = Number(process.argv[2] ?? 2400);
let seed = Number(process.argv[3] ?? 1) >>> 0;

function rand() {            // xorshift32: same sequence everywhere
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const words = ("the quick brown fox jumps over lazy dog It's they're we've " +
  "I'm you'll she'd THE Don'T CAN'T hello world tokenization transformer " +
  "attention paged memory block kernel server nginx request stream " +
  "naïve café résumé façade coöperate Ünïcödé Straße ĳssel œuvre").split(" ");
const code = [
  "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
  "if x == None:\n\tpass", "#include <stdio.h>\nint main(void) { return 0; }",
  "const re = /a+b*/g; // regex", "SELECT * FROM t WHERE id = 42;",
  "<div class=\"x\">&amp;</div>", "{\"key\": [1, 2.5, -3e10, null, true]}",
  "x+=1;y-=2;z*=3", "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
  "    indented\n        more\n", "a\r\nb\r\n\r\nc", "$ ls -la | grep '^d' > out.txt",
];
const cjk = ["日本語のテキスト", "中文分词测试", "한국어 문장입니다", "東京都", "漢字かなカナ",
  "我爱北京天安门", "ｆｕｌｌｗｉｄｔｈ　ｓｐａｃｅ", "１２３４５"];
const emoji = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇯🇵", "🤖", "✨", "🔥🔥", "☕"];
const marks = ["e\u0301", "a\u0308\u0304", "n\u0303", "\u0915\u094d\u0937", "o\u0323\u0302",
  "A\u030a", "\u1100\u1161\u11a8", "Zalgo z\u0351\u0342a\u0334l\u0358g\u035bo", "ﬁ ﬂ ﬀ", "Å Ω K"];
const specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|im_start|>",
  "<|im_end|>", "<s>", "</s>", "<unk>", "<|begin_of_text", "|end_of_text|>",
  "<|im_start", "< s>", "<s >", "<<s>>", "<|endoftext|>", "<think>", "</think>",
  "<0x41>", "<|start_header_id|>user<|end_header_id|>", "▁hello"];
const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", " \n ", "\r\n", "\u00a0", "\u3000",
  "\u2003", " \t \n", "        ", "\u200b", "\u0085", "\ufeff"];
const digits = () => String(int(0, 10 ** int(1, 12)));
const scripts = ["Привет мир", "Γειά σου κόσμε", "مرحبا بالعالم", "שלום עולם",
  "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới", "Բարեւ աշխարհ", "ሰላም ልዑል"];
const punct = ["...", "!!", "?!", "—", "–", "«»", "“quoted”", "‘x’", "(", ")", "[]", "{}",
  "@#$%^&*", "~`", "'s", "'S", "'LL", "’s", "¿¡", "§¶", "€100", "£5", "¥"];

const generators = [
  () => Array.from({ length: int(3, 25) }, () => pick(words)).join(" ") + pick([".", "!", "?", ""]),
  () => pick(code),
  () => pick(words) + pick(spaces) + pick(words) + pick(spaces) + pick(spaces),
  () => digits() + pick([" ", ",", ".", ""]) + digits() + " " + pick(words),
  () => pick(cjk) + pick(["。", "、", " ", ""]) + pick(cjk),
  () => pick(words) + " " + pick(emoji) + pick(emoji) + " " + pick(words),
  () => pick(marks) + " " + pick(words) + pick(marks),
  () => pick(specials) + pick(words) + pick(specials) + " " + pick(words),
  () => pick(spaces).repeat(int(1, 6)) + pick(words) + pick(spaces).repeat(int(1, 4)),
  () => pick(scripts) + " " + digits(),
  () => pick(punct) + pick(words) + pick(punct) + pick(punct),
];

function mixture() {
  const all = [words, cjk, emoji, marks, specials, spaces, scripts, punct];
  let s = "";
  for (let i = int(1, 12); i > 0; i--) {
    s += rand() < 0.15 ? digits() : pick(pick(all));
  }
  return s;
}

const out = [];
for (let i = 0; i < count; i++) {
  out.push(JSON.stringify(rand() < 0.25 ? mixture() : pick(generators)()));
}
out.push(JSON.stringify(""), JSON.stringify(" "), JSON.stringify("a"),
  JSON.stringify("x".repeat(3000)), JSON.stringify("日".repeat(500)),
  JSON.stringify(" ".repeat(200) + "end"), JSON.stringify("1234567890".repeat(20)));
process.stdout.write(out.join("\n") + "\n");
