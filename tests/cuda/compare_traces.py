#!/usr/bin/env python3
"""Compare two GLM53_TRACE_DIR dumps (e.g. CPU vs CUDA of the same step) point by point.

    python3 tests/cuda/compare_traces.py CPU_DIR CUDA_DIR [--hf HF_DEBUG_DIR]

Prints, in graph order, max|b - a| / max|a| for every tensor both dirs hold, flagging the first one over 2e-2.
With --hf, also compares the hidden streams after every layer with transformers' dump
(tests/fixtures/make_fixtures.py --debug-dump: hidden_after_layer_XX.npy).
"""
import os
import sys

import numpy as np

ORDER = ["embed", "attn_x", "attn_post", "attn_comb", "attn_xn", "kda_q_raw", "kda_g", "kda_beta", "kda_gz",
         "kda_q_conv", "kda_v_conv", "kda_core", "kda_normed", "mla_qa", "mla_q", "mla_latent", "kpool_kappa",
         "kpool_sigma", "kpool_Qi", "kpool_wi", "kpool_scores", "mla_o", "attn_y", "attn_H", "ffn_xn", "moe_logits",
         "moe_weights", "moe_routed", "ffn_y", "ffn_H"]


def key(name):
    step, layer, rest = name[:-4].split("_", 2)
    return (int(step), int(layer) if layer != "99" else -1, ORDER.index(rest) if rest in ORDER else 99, rest)


def main():
    a_dir, b_dir = sys.argv[1], sys.argv[2]
    hf = sys.argv[sys.argv.index("--hf") + 1] if "--hf" in sys.argv else None
    names = sorted(set(os.listdir(a_dir)) & set(os.listdir(b_dir)), key=key)
    flagged = False
    for name in names:
        a, b = np.load(os.path.join(a_dir, name)), np.load(os.path.join(b_dir, name))
        scale = np.abs(a).max()
        err = float(np.abs(b - a).max() / scale) if scale > 0 else float(np.abs(b - a).max())
        mark = ""
        if err > 2e-2 and not flagged:
            mark, flagged = "   <== first over 2e-2", True
        print(f"{name:40s} {str(a.shape):18s} {err:.2e}{mark}")
    if hf:
        for name in sorted(os.listdir(hf)):
            if not name.startswith("hidden_after_layer_"):
                continue
            layer = int(name[len("hidden_after_layer_"):-4])
            ref = np.load(os.path.join(hf, name)).reshape(-1)
            for d in (a_dir, b_dir):
                mine = os.path.join(d, f"000_{layer:02d}_ffn_H.npy")
                if os.path.exists(mine):
                    got = np.load(mine).reshape(-1)
                    print(f"HF layer {layer:2d} vs {d}: {np.abs(got - ref).max() / np.abs(ref).max():.2e}")


if __name__ == "__main__":
    main()
