#!/usr/bin/env python3
"""training/indexer_probe.py - does the model's KPool indexer select the pool that holds a retrieval answer?

Retrieval at 2,048 tokens is scored with the sparse layers attending only to the positions their indexer selects
(index_topk 256 tokens: 64 closed pools and the open tail). However well the attention could look a code up, the
answer is lost when the pool holding the code is not selected at the answer row. This probe runs glm53 on the CPU
over held-out retrieval prompts of one length (evals/data/tiny/retrieval.jsonl, rendered with the chat template
as the evals render them), with GLM53_TRACE_DIR set, and reads every sparse layer's pool scores at the last prompt
row (the row that produces the answer's first token): the rank of the pool holding the queried code's first token
among the row's closed pools (0 = best; equal scores rank the lower pool first, the engine's tie rule).

    python3 training/indexer_probe.py [--model models/glm53-tiny] [--length 2048] [--n 16] [--threads 2]

Prints one line per prompt and per sparse layer the ranks' median, and how many fall in the selection's 64 pools.
Needs numpy (`apt-get install python3-numpy` gives it to /usr/bin/python3), a build (bin/glm53) and LuaJIT; about
25 s a prompt on 2 cores. The index (64 pools) assumes the tiny model's index_topk of 256 and pools of 4 tokens.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import chat  # noqa: E402

POOL = 4          # tokens a pool (the tiny model's index_pool_size)
SELECTED = 64     # closed pools the selection keeps (index_topk 256 / POOL)


def glm53(*args, env=None):
    return subprocess.run([os.path.join(ROOT, "bin", "glm53"), *args], check=True, env=env, capture_output=True,
                          text=True).stdout


def tokenize(texts, tmp):
    src, dst = os.path.join(tmp, "texts.json"), os.path.join(tmp, "ids.json")
    with open(src, "w") as f:
        json.dump(texts, f)
    glm53("tokenize", "--input", src, "--out", dst)
    with open(dst) as f:
        return json.load(f)


def code_position(item_id, ids, prefix_ids):
    """Token position of the code's first token: the length of the prompt cut just before it (whose tokens, but for
    the last, must be the prompt's own)."""
    if ids[:len(prefix_ids) - 1] != prefix_ids[:-1]:
        raise RuntimeError(f"{item_id}: the prompt cut before the code tokenizes differently alone")
    return len(prefix_ids)


def last_row_scores(trace_dir):
    """{layer: scores of the last traced row} from the last step's kpool_scores (the prompt's last row)."""
    files = sorted(f for f in os.listdir(trace_dir) if f.endswith("_kpool_scores.npy"))
    last_step = max(f.split("_")[0] for f in files)
    return {int(f.split("_")[1]): np.load(os.path.join(trace_dir, f))[-1] for f in files if f.startswith(last_step)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "glm53-tiny"))
    ap.add_argument("--length", type=int, default=2048, help="the held-out items' context length (256 .. 4096)")
    ap.add_argument("--n", type=int, default=16, help="prompts")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    with open(os.path.join(ROOT, "evals", "data", "tiny", "retrieval.jsonl")) as f:
        items = [json.loads(line) for line in f]
    items = [it for it in items if it["meta"]["context_tokens_approx"] == a.length][:a.n]
    if not items:
        sys.exit(f"no held-out retrieval item of length {a.length}")
    texts, prefixes = [], []
    for it in items:
        text = chat.render_python(it["messages"], add_generation_prompt=True)
        question = it["messages"][-1]["content"].split("\n")[-1]
        query = re.search(r"code (?:of|for) ([A-Z]{3}-[0-9]{2})", question).group(1)
        context = text[:text.rfind(question)]
        at = -1
        for sep in (" is ", ": "):   # data.RETRIEVAL_LINES: "... {k} is {v}." or "Code of {k}: {v}."
            at = context.find(f"{query}{sep}")
            if at >= 0:
                at += len(query) + len(sep)
                break
        if at < 0:
            sys.exit(f"{it['id']}: cannot find the line of {query}")
        texts.append(text)
        prefixes.append(text[:at])

    ranks = {}
    with tempfile.TemporaryDirectory() as tmp:
        ids, prefix_ids = tokenize(texts, tmp), tokenize(prefixes, tmp)
        for it, x, p in zip(items, ids, prefix_ids):
            pos = code_position(it["id"], x, p)
            tokens, trace = os.path.join(tmp, "tokens.npy"), os.path.join(tmp, "trace")
            np.save(tokens, np.asarray(x, np.int32))
            os.makedirs(trace, exist_ok=True)
            for f in os.listdir(trace):
                os.remove(os.path.join(trace, f))
            glm53("logits", "--model", a.model, "--tokens", tokens, "--out", os.path.join(tmp, "logits.npy"),
                  "--threads", str(a.threads), "--activations", "f32", env=dict(os.environ, GLM53_TRACE_DIR=trace))
            line = []
            for layer, row in sorted(last_row_scores(trace).items()):
                order = np.lexsort((np.arange(len(row)), -row))   # descending score, the lower pool on ties
                rank = int(np.flatnonzero(order == pos // POOL)[0])
                ranks.setdefault(layer, []).append(rank)
                line.append(f"layer {layer} rank {rank} of {len(row)}")
            print(f"{it['id']}: {len(x)} tokens, code at {pos} (pool {pos // POOL}): {', '.join(line)}", flush=True)
    for layer, r in sorted(ranks.items()):
        print(f"layer {layer}: median rank {int(np.median(r))}, selected (rank < {SELECTED}) {sum(x < SELECTED for x in r)}"
              f" of {len(r)}")


if __name__ == "__main__":
    main()
