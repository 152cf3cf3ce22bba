// probe_unicode.js - asks HF tokenizers itself which code points its regex classes and its NFC normalizer
// treat how, and writes the answers to tests/tokenizer/hf_unicode.json (input of gen_tables.py).
//
// Why probe instead of reading the Unicode database: HF tokenizers matches the split regex with Oniguruma and
// normalises with the unicode-normalization-alignments crate, and each carries its own Unicode version (0.23:
// Unicode 16 classes, a pre-13 NFC). Parity needs exactly those versions, so the tables come from the oracle.
//
// Needs node and the npm package `tokenizers` (the Node binding of the same Rust crate):
//   npm install --prefix .cache/node tokenizers@0.23.2
//   NODE_PATH=.cache/node/node_modules node tests/tokenizer/probe_unicode.js
"use strict";
const tk = require("tokenizers");
const fs = require("fs");
const path = require("path");

const MAX = 0x110000;
const isScalar = c => c < MAX && !(c >= 0xd800 && c <= 0xdfff);

// A tokenizer whose only job is to run one Split(Removed) pre-tokenizer: the pattern is the class to probe.
function splitter(pattern) {
  const json = {
    version: "1.0", truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: "Split", pattern: { Regex: pattern }, behavior: "Removed", invert: false },
    post_processor: null, decoder: null,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab: { a: 0 }, merges: [] },
  };
  return tk.Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer();
}

// Membership of every scalar value in `pattern`, as sorted inclusive ranges. The probe string holds many code
// points at once; the pieces left after removing the matches (with code point offsets) tell which matched.
function classRanges(pattern) {
  const pt = splitter(pattern);
  const member = new Uint8Array(MAX);
  const CHUNK = 4096;
  for (let c0 = 0; c0 < MAX; c0 += CHUNK) {
    const cps = [];
    for (let c = c0; c < Math.min(c0 + CHUNK, MAX); c++) if (isScalar(c)) cps.push(c);
    if (cps.length === 0) continue;
    const kept = new Uint8Array(cps.length);
    // offsets count code points of the input
    for (const [, [s, e]] of pt.preTokenizeString(String.fromCodePoint(...cps))) kept.fill(1, s, e);
    cps.forEach((c, i) => { member[c] = kept[i] ? 0 : 1; });
  }
  return toRanges(member);
}

function toRanges(member) {
  const ranges = [];
  for (let c = 0; c < MAX; c++) {
    if (!member[c]) continue;
    let e = c;
    while (e + 1 < MAX && member[e + 1]) e++;
    ranges.push([c, e]);
    c = e;
  }
  return ranges;
}

// Normalises every scalar value on its own: "\n" (a starter that composes with nothing) separates them, so
// one call handles a whole chunk. Returns {cp: [code points]} for the values the normaliser changes.
function normalizeEach(normalizer, prefix) {
  const changed = {};
  const CHUNK = 4096;
  const pre = [...prefix];
  for (let c0 = 0; c0 < MAX; c0 += CHUNK) {
    const cps = [];
    for (let c = c0; c < Math.min(c0 + CHUNK, MAX); c++) if (isScalar(c) && c !== 10) cps.push(c);
    const input = cps.map(c => prefix + String.fromCodePoint(c)).join("\n");
    const parts = normalizer.normalizeString(input).split("\n");
    if (parts.length !== cps.length) throw new Error("separator did not survive normalisation");
    cps.forEach((c, i) => {
      const got = [...parts[i]].map(ch => ch.codePointAt(0));
      const want = pre.map(ch => ch.codePointAt(0)).concat([c]);
      if (got.length !== want.length || got.some((v, k) => v !== want[k])) changed[c] = got;
    });
  }
  return changed;
}

function probe() {
  const classes = {};
  for (const [name, pattern] of Object.entries({ L: "\\p{L}", N: "\\p{N}", P: "\\p{P}", S: "\\p{S}",
                                                 M: "\\p{M}", WS: "\\s" })) {
    classes[name] = classRanges(pattern);
  }
  const nfd = normalizeEach(tk.nfdNormalizer(), "");
  const nfc = normalizeEach(tk.nfcNormalizer(), "");
  // "a" U+0345 (ccc 240, the largest class) x: canonical ordering moves x before U+0345 exactly when
  // 0 < ccc(x) < 240, so this lists the marks HF's normaliser knows to reorder.
  const reorderedAfter0345 = Object.keys(normalizeEach(tk.nfdNormalizer(), "a\u0345")).map(Number)
    .filter(c => nfd[c] === undefined && !(c >= 0xac00 && c <= 0xd7a3));
  // Hangul syllables decompose algorithmically (the C code computes them): check, then leave them out.
  for (let c = 0xac00; c <= 0xd7a3; c++) {
    const s = c - 0xac00, want = [0x1100 + Math.floor(s / 588), 0x1161 + Math.floor((s % 588) / 28)];
    if (s % 28) want.push(0x11a7 + (s % 28));
    if (JSON.stringify(nfd[c]) !== JSON.stringify(want)) throw new Error("Hangul " + c.toString(16));
    delete nfd[c];
  }

  // Relative order of the combining classes HF uses, from pairwise reordering: groups of equal class, ascending.
  const nfdN = tk.nfdNormalizer();
  const cmp = (a, b) => {
    const s = nfdN.normalizeString("a" + String.fromCodePoint(a, b));
    if (s.codePointAt(1) === b) return 1;   // reordered: ccc(a) > ccc(b)
    const t = nfdN.normalizeString("a" + String.fromCodePoint(b, a));
    if (t.codePointAt(1) === a) return -1;
    return 0;
  };
  const marks = reorderedAfter0345.concat([0x345]).sort(cmp);
  const cccGroups = [];
  for (const m of marks) {
    const last = cccGroups[cccGroups.length - 1];
    if (last && cmp(last[0], m) === 0) last.push(m); else cccGroups.push([m]);
  }
  return {
    source: "HF tokenizers " + require("tokenizers/package.json").version + " (Node binding), probe_unicode.js",
    classes, nfd, nfc, ccc_groups: cccGroups,
  };
}

module.exports = { probe };

if (require.main === module) {
  const out = probe();
  const dest = path.join(__dirname, "hf_unicode.json");
  fs.writeFileSync(dest, JSON.stringify(out) + "\n");
  for (const [k, r] of Object.entries(out.classes)) {
    console.log(k, r.length, "ranges", r.reduce((n, [a, b]) => n + b - a + 1, 0), "code points");
  }
  console.log("nfd", Object.keys(out.nfd).length, "nfc", Object.keys(out.nfc).length, "ccc groups",
              out.ccc_groups.length, "->", dest);
}
