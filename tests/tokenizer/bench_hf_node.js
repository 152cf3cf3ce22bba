// bench_hf_node.js - bench_hf.py through the Node binding of HF tokenizers, for machines without Python
// `tokenizers`: same corpus, one encode call per document, best of N passes, one thread.
//   RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false NODE_PATH=.cache/node/node_modules \
//     node tests/tokenizer/bench_hf_node.js [tokenizer.json] [corpus] [repeat]
"use strict";
const { Tokenizer } = require("tokenizers");
const fs = require("fs");
const path = require("path");
const root = path.join(__dirname, "..", "..");
const tokPath = process.argv[2] || path.join(root, ".cache", "tokenizers", "qwen3.json");
const corpus = process.argv[3] || path.join(root, ".cache", "bench", "tokenizer_corpus.txt");
const repeat = Number(process.argv[4] || 3);

(async () => {
  const raw = fs.readFileSync(corpus);
  const docs = raw.toString("utf8").split("\x1e");
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
  let t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokPath);
  const load = Number(process.hrtime.bigint() - t0) / 1e9;
  let best = Infinity, tokens = 0;
  for (let r = 0; r < repeat; r++) {
    t0 = process.hrtime.bigint();
    let count = 0;
    for (const d of docs) count += (await tok.encode(d, null, { addSpecialTokens: false })).getLength();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    tokens = count;
  }
  const v = require("tokenizers/package.json").version;
  console.log(`${("HF tokenizers " + v + " (node)").padEnd(22)} ${load.toFixed(3).padStart(8)} ${String(tokens).padStart(10)}` +
              ` ${best.toFixed(3).padStart(8)} ${(bytes / 1e6 / best).toFixed(2).padStart(8)}`);
})();
