#!/usr/bin/env python3
"""training/parity.py - glm53's CPU logits against transformers' float64 logits of the tiny model's check prompts.

check_hf.py (on the GPU machine) writes, for 8 held-out prompts (two with a picture), the prompt's token ids and
transformers' float64 logits at the rows it lists, for the BF16 model and its FP8 copy (training/runs/check/,
index.json names the files). This script runs `bin/glm53 logits` on the same ids (and the same picture) with each
model directory here and prints, per prompt, the largest |glm53 - transformers| / max |transformers| over the
listed rows and whether every row's argmax is equal. Exit status 1 when a prompt exceeds --tol or an argmax differs.

    python3 training/parity.py [--check training/runs/check] [--bf16 models/glm53-tiny]
                               [--fp8 models/glm53-tiny-fp8] [--tol 1e-4] [--threads 2]

Needs numpy, a build (bin/glm53) and LuaJIT. The FP8 directory comes from `python3 training/make_fp8.py`.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def engine_logits(model, tokens_path, image, threads, out):
    cmd = [os.path.join(ROOT, "bin", "glm53"), "logits", "--model", model, "--tokens", tokens_path, "--out", out,
           "--threads", str(threads)]
    if image:
        cmd += ["--image", image]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return np.load(out)


def compare(check_dir, variant, model, threads, tol, tmp):
    """-> list of (name, rows, max relative error, argmax equal) for one variant (bf16 or fp8)."""
    index = json.load(open(os.path.join(check_dir, "index.json")))
    results = []
    for p in index["prompts"]:
        rec = p[variant]
        ref = np.load(os.path.join(check_dir, rec["logits"]))  # float64 [rows, vocab]
        pos = np.load(os.path.join(check_dir, rec["positions"]))  # int [rows]: the prompt rows ref holds
        tokens = np.load(os.path.join(check_dir, rec["tokens"])).astype(np.int32)  # [T]
        tok_path = os.path.join(tmp, f"{p['name']}.tokens.npy")
        np.save(tok_path, tokens)
        image = os.path.join(check_dir, p["image"]) if p.get("image") else None
        got = engine_logits(model, tok_path, image, threads, os.path.join(tmp, f"{p['name']}.{variant}.npy"))
        got = got[pos].astype(np.float64)[:, :ref.shape[1]]
        rel = float(np.abs(got - ref).max() / np.abs(ref).max())
        same = bool((got.argmax(-1) == ref.argmax(-1)).all())
        results.append((p["name"], len(pos), rel, same))
        print(f"{variant:5s} {p['name']:14s} rows {len(pos):4d}  max rel. error {rel:.2e}  argmax "
              f"{'equal' if same else 'DIFFERS'}{'' if rel <= tol else '  OVER ' + str(tol)}", flush=True)
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--check", default=os.path.join(ROOT, "training/runs/check"))
    ap.add_argument("--bf16", default=os.path.join(ROOT, "models/glm53-tiny"))
    ap.add_argument("--fp8", default=os.path.join(ROOT, "models/glm53-tiny-fp8"))
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for variant, model in (("bf16", a.bf16), ("fp8", a.fp8)):
            if not os.path.isdir(model):
                print(f"{variant}: no {model} (python3 training/make_fp8.py makes the FP8 copy)", file=sys.stderr)
                ok = False
                continue
            for _, _, rel, same in compare(a.check, variant, model, a.threads, a.tol, tmp):
                ok = ok and same and rel <= a.tol
    print("parity: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
