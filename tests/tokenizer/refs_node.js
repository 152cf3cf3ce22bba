// refs_node.js - the same references as make_refs.py, from the Node binding of HF tokenizers: a local oracle
// for development where Python `tokenizers` is not installed. The committed references come from
// make_refs.py (Python); this writes elsewhere, and the tests read it only when told to:
//
//   npm install --prefix .cache/node tokenizers@0.23.2
//   NODE_PATH=.cache/node/node_modules node tests/tokenizer/refs_node.js .cache/refs-node
//   GLM53_TOKENIZER_REFS=.cache/refs-node busted --lua=luajit tests/lua/tokenizer_spec.lua
"use strict";
const tk = require("tokenizers");
const fs = require("fs");
const path = require("path");
const zlib = require("zlib");
const crypto = require("crypto");

const here = __dirname, root = path.join(here, "..", "..");
const outDir = process.argv[2] || path.join(root, ".cache", "refs-node");
const tokDir = process.argv[3] || path.join(root, ".cache", "tokenizers");

const raw = fs.readFileSync(path.join(here, "corpus.json"));
const sha = crypto.createHash("sha256").update(raw).digest("hex");
const decoder = new TextDecoder("utf-8");   // WHATWG replacement = Python's errors="replace"
const texts = JSON.parse(raw.toString("utf8")).map(x => typeof x === "string" ? x
  : decoder.decode(Buffer.from(x.b64, "base64")));

async function refsFor(name, file) {
  const t = tk.Tokenizer.fromFile(file);
  const ids = [];
  for (const s of texts) ids.push((await t.encode(s, null, { addSpecialTokens: false })).getIds());
  const dec = await t.decodeBatch(ids, false), decSkip = await t.decodeBatch(ids, true);
  const cuts = [];
  for (let i = 0; i < ids.length; i += 3) {
    const n = ids[i].length;
    if (n >= 3) {
      const a = Math.floor(n / 3), b = Math.floor(2 * n / 3);
      cuts.push([i, a, b, await t.decode(ids[i].slice(a, b), false)]);
    }
  }
  return {
    tokenizer: name, source: "HF tokenizers " + require("tokenizers/package.json").version + " (Node binding)",
    corpus_sha256: sha, ids,
    decode: dec.map((d, i) => d === texts[i] ? null : d),
    decode_skip: decSkip.map((s, i) => s === dec[i] ? null : s),
    cuts,
  };
}

(async () => {
  fs.mkdirSync(outDir, { recursive: true });
  const files = ["qwen3", "deepseek_v3", "llama3"].map(n => [n, path.join(tokDir, n + ".json")]);
  files.push(["tiny", path.join(root, "models", "tiny", "tokenizer.json")]);
  for (const [name, file] of files) {
    if (!fs.existsSync(file)) { console.log("skip", name, "(no " + file + ")"); continue; }
    const dest = path.join(outDir, name + ".json.gz");
    fs.writeFileSync(dest, zlib.gzipSync(JSON.stringify(await refsFor(name, file)), { level: 9 }));
    console.log(dest, fs.statSync(dest).size, "bytes");
  }
  const probe = require("./probe_unicode.js").probe();
  const uni = { source: probe.source, classes: probe.classes, nfd: probe.nfd, nfc: probe.nfc };
  fs.writeFileSync(path.join(outDir, "unicode.json"), JSON.stringify(uni) + "\n");
})();
