#!/usr/bin/env python3
"""bench_hf.py - HF tokenizers' encode throughput on one thread, over the corpus scripts/bench_tokenizer.lua made.

    luajit scripts/bench_tokenizer.lua                      # writes .cache/bench/tokenizer_corpus.txt, prints glm53
    python3 tests/tokenizer/bench_hf.py [--tokenizer FILE] [--corpus PATH] [--repeat N]

Same corpus bytes, same documents (separated by 0x1E), one encode call per document without special tokens,
best of N passes, on the calling thread only (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1 are set before
tokenizers is imported). Run both scripts on the same machine; compare the MB/s lines.
"""
import argparse
import os
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

import tokenizers  # noqa: E402  (after the environment is set)
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, ".cache", "tokenizers", "qwen3.json"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, ".cache", "bench", "tokenizer_corpus.txt"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    with open(args.corpus, "rb") as f:
        raw = f.read()
    docs = [d.decode("utf-8") for d in raw.split(b"\x1e")]
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)

    t0 = time.perf_counter()
    tok = Tokenizer.from_file(args.tokenizer)
    load_s = time.perf_counter() - t0

    best, n_tokens = float("inf"), 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        count = 0
        for d in docs:
            count += len(tok.encode(d, add_special_tokens=False).ids)
        best = min(best, time.perf_counter() - t0)
        n_tokens = count

    print("tokenizer  %s" % args.tokenizer)
    print("corpus     %s: %d documents, %.2f MB" % (args.corpus, len(docs), n_bytes / 1e6))
    print("%-22s %8s %10s %8s %8s" % ("", "load s", "tokens", "s", "MB/s"))
    print("%-22s %8.3f %10d %8.3f %8.2f" % ("HF tokenizers %s" % tokenizers.__version__, load_s, n_tokens, best,
                                            n_bytes / 1e6 / best))


if __name__ == "__main__":
    main()
