#!/usr/bin/env python3
"""make_bench_model.py - a GLM-5.3-Flash checkpoint with the REAL dimensions and random weights, for timing.

    python3 scripts/make_bench_model.py --out DIR [--layers kda-dense,mla-moe | flash] [--mtp] [--seed N] [--gpu]

numpy only; --gpu draws the random values with torch on the GPU instead (a 288-expert MoE layer in seconds rather
than a minute: the bytes come from one device-side generator and are copied out in large blocks). Every layer has the released checkpoint's shapes and dtypes (glm53-architecture.md section 3):
hidden 4096, vocab 154880, KDA 64 x 128, MLA 64 heads with q_lora 1536 / kv_lora 512 / 256-d heads, KPool
indexer 32 x 128 with kpool 4 and top 2048, 288 routed experts (top 8, width 2048) + 1 shared, dense width 12288;
FP8 E4M3 with 128 x 128 F32 scales on experts, shared experts, dense MLPs and the MLA q_a/q_b/kv_a/o
projections, BF16 elsewhere (F32 for A_log, dt_bias, conv, correction bias, mHC base/scale). Only the number of
layers is cut (each MoE layer is 7.3 GB). `--layers flash` is the "flash slice" of the performance issues: the real
schedule's first 8 layers (KDA at 0-2 and 4-6, sparse MLA at 3 and 7, dense MLP at 0-2, MoE at 3-7); `--mtp` adds
the MTP layer after the last one (sparse MLA + MoE with FP8 projections, enorm/hnorm/eh_proj, its own head norm),
so the flash slice with --mtp is about 45 GB. The weights are random, so the output is noise: this model exists to
measure time against the bytes a step must read (scripts/bench.lua). Written into an ignored folder, never
committed.
"""
import argparse
import json
import os
import struct

import numpy as np

D, V, S = 4096, 154880, 4
HK, DK, K = 64, 128, 4
HM, DQ, R, DN, DVM = 64, 1536, 512, 256, 256
HI, DI, P, TOPK = 32, 128, 4, 2048
E, TOPE, FE, F = 288, 8, 2048, 12288


class Writer:
    """Streams tensors into one .safetensors file: the header is written first from the declared shapes."""

    def __init__(self, path, specs):
        self.specs = specs   # [(name, dtype, shape)]
        self.f = open(path, "wb")
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape in specs:
            n = int(np.prod(shape)) * {"F32": 4, "BF16": 2, "F8_E4M3": 1}[dtype]
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
        h = json.dumps(header).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        self.f.write(struct.pack("<Q", len(h)))
        self.f.write(h)

    def write(self, array):
        self.f.write(np.ascontiguousarray(array).tobytes())


def bf16(a):
    u = np.asarray(a, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


FLASH = "kda-dense,kda-dense,kda-dense,mla-moe,kda-moe,kda-moe,kda-moe,mla-moe"


def layer_specs(i, kind, mtp=False):
    """The tensors of decoder layer i; mtp: the MTP layer (no mHC: it mixes the embedding and the last hidden
    state through enorm, hnorm and eh_proj instead, and has its own head norm)."""
    p = f"model.language_model.layers.{i}."
    out = []
    if mtp:
        out += [(p + "enorm.weight", "BF16", (D,)), (p + "hnorm.weight", "BF16", (D,)),
                (p + "eh_proj.weight", "BF16", (D, 2 * D)), (p + "shared_head.norm.weight", "BF16", (D,))]
    else:
        for site in ("attn", "ffn"):
            out += [(p + f"hc_{site}_fn", "BF16", ((2 + S) * S, S * D)),
                    (p + f"hc_{site}_base", "F32", ((2 + S) * S,)), (p + f"hc_{site}_scale", "F32", (3,))]
    out += [(p + "input_layernorm.weight", "BF16", (D,)), (p + "post_attention_layernorm.weight", "BF16", (D,))]
    mixer, mlp = kind.split("-")
    if mixer not in ("kda", "mla") or mlp not in ("dense", "moe"):
        raise SystemExit(f"make_bench_model.py: unknown layer kind {kind!r} (kda-dense, kda-moe, mla-dense, mla-moe)")
    a = p + "self_attn."
    if mixer == "kda":
        C = HK * DK
        for n in "qkv":
            out += [(a + f"{n}_proj.weight", "BF16", (C, D)), (a + f"{n}_conv1d.weight", "F32", (C, 1, K))]
        out += [(a + "b_proj.weight", "BF16", (HK, D)), (a + "f_a_proj.weight", "BF16", (DK, D)),
                (a + "f_b_proj.weight", "BF16", (C, DK)), (a + "g_a_proj.weight", "BF16", (DK, D)),
                (a + "g_b_proj.weight", "BF16", (C, DK)), (a + "A_log", "F32", (HK,)), (a + "dt_bias", "F32", (C,)),
                (a + "o_norm.weight", "BF16", (DK,)), (a + "o_proj.weight", "BF16", (D, C))]
    else:
        for name, shape in (("q_a_proj", (DQ, D)), ("q_b_proj", (HM * DN, DQ)), ("kv_a_proj_with_mqa", (R, D)),
                            ("o_proj", (D, HM * DVM))):
            out += fp8(a + name, shape)
        out += [(a + "q_a_layernorm.weight", "BF16", (DQ,)), (a + "kv_a_layernorm.weight", "BF16", (R,)),
                (a + "kv_b_proj.weight", "BF16", (HM * (DN + DVM), R))]
        x = a + "indexer."
        out += [(x + "wq_b.weight", "BF16", (HI * DI, DQ)), (x + "wk.weight", "BF16", (DI, D)),
                (x + "k_norm.weight", "BF16", (DI,)), (x + "k_norm.bias", "BF16", (DI,)),
                (x + "weights_proj.weight", "BF16", (HI, D)), (x + "index_kpool_compress_ape", "BF16", (P, DI)),
                (x + "index_kpool_compress_gate", "BF16", (DI, D))]
    m = p + "mlp."
    if mlp == "dense":
        out += fp8(m + "gate_proj", (F, D)) + fp8(m + "up_proj", (F, D)) + fp8(m + "down_proj", (D, F))
    else:
        out += [(m + "gate.weight", "BF16", (E, D)), (m + "gate.e_score_correction_bias", "F32", (E,))]
        for e in range(E):
            out += fp8(m + f"experts.{e}.gate_proj", (FE, D)) + fp8(m + f"experts.{e}.up_proj", (FE, D))
            out += fp8(m + f"experts.{e}.down_proj", (D, FE))
        out += fp8(m + "shared_experts.gate_proj", (FE, D)) + fp8(m + "shared_experts.up_proj", (FE, D))
        out += fp8(m + "shared_experts.down_proj", (D, FE))
    return out


def fp8(name, shape):
    o, i = shape
    return [(name + ".weight", "F8_E4M3", shape), (name + ".weight_scale_inv", "F32", (-(-o // 128), -(-i // 128)))]


class NumpySource:
    """Random bytes and standard normals from numpy (the default: no torch needed)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def bytes(self, n):
        return np.frombuffer(self.rng.bytes(n), np.uint8)

    def normal(self, n):
        return self.rng.standard_normal(n).astype(np.float32)


class TorchSource:
    """The same draws from torch's CUDA generator: orders of magnitude faster for the expert weights."""

    def __init__(self, seed):
        import torch
        self.torch = torch
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(seed)

    def bytes(self, n):
        t = self.torch
        return t.randint(0, 256, (n,), dtype=t.uint8, device="cuda", generator=self.gen).cpu().numpy()

    def normal(self, n):
        t = self.torch
        return t.randn(n, dtype=t.float32, device="cuda", generator=self.gen).cpu().numpy()


def random_values(src, name, dtype, shape):
    n = int(np.prod(shape))
    if dtype == "F8_E4M3":
        # Random bytes with the exponent's top bit cleared: |value| < 2, never NaN (0x7f/0xff need exponent 15).
        return src.bytes(n) & 0xBF
    fan_in = shape[-1] if len(shape) > 1 else 1
    if name.endswith("weight_scale_inv"):
        v = np.full(n, 1.0 / (np.sqrt(shape[-1] * 128.0) * 1.5), np.float32)
    elif len(shape) == 1 or name.endswith("_base") or name.endswith("_scale"):
        v = 1.0 + 0.05 * src.normal(n)
        if name.endswith(("A_log", "dt_bias", "_base", "e_score_correction_bias", "k_norm.bias")):
            v -= 1.0
    else:
        v = src.normal(n) / np.float32(np.sqrt(fan_in))
    v = v.astype(np.float32)
    return v if dtype == "F32" else bf16(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", default="kda-dense,mla-moe",
                    help="comma-separated mixer-mlp kinds: kda-dense, kda-moe, mla-dense, mla-moe (mla: sparse MLA "
                         "with the KPool indexer), or flash (" + FLASH + ")")
    ap.add_argument("--mtp", action="store_true", help="add the MTP layer (sparse MLA + MoE) after the last layer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpu", action="store_true", help="draw the random values with torch on the GPU")
    args = ap.parse_args()
    kinds = (FLASH if args.layers == "flash" else args.layers).split(",")
    os.makedirs(args.out, exist_ok=True)
    src = TorchSource(args.seed) if args.gpu else NumpySource(args.seed)
    specs = [("model.language_model.embed_tokens.weight", "BF16", (V, D)),
             ("model.language_model.norm.weight", "BF16", (D,)), ("lm_head.weight", "BF16", (V, D))]
    for i, kind in enumerate(kinds):
        specs += layer_specs(i, kind)
    if args.mtp:
        specs += layer_specs(len(kinds), "mla-moe", mtp=True)
    w = Writer(os.path.join(args.out, "model.safetensors"), specs)
    total = 0
    for k, (name, dtype, shape) in enumerate(specs):
        w.write(random_values(src, name, dtype, shape))
        total += int(np.prod(shape))
        if k % 200 == 0:
            print(f"  {k}/{len(specs)} tensors", flush=True)
    w.f.close()
    text = {
        "model_type": "glm5_next_text", "vocab_size": V, "hidden_size": D, "num_hidden_layers": len(kinds),
        "intermediate_size": F, "moe_intermediate_size": FE, "n_routed_experts": E, "num_experts_per_tok": TOPE,
        "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "num_attention_heads": HM, "num_key_value_heads": HM, "q_lora_rank": DQ, "kv_lora_rank": R,
        "qk_nope_head_dim": DN, "qk_rope_head_dim": 0, "v_head_dim": DVM, "index_n_heads": HI, "index_head_dim": DI,
        "index_topk": TOPK, "index_kpool": P, "linear_num_heads": HK, "linear_head_dim": DK,
        "linear_conv_kernel_dim": K, "linear_lower_bound": -5.0, "hc_mult": S, "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6, "rms_norm_eps": 1e-5, "swiglu_limit": 10.0, "num_nextn_predict_layers": 1 if args.mtp else 0,
        "layer_types": ["linear_attention" if k.startswith("kda") else "deepseek_sparse_attention" for k in kinds],
        "mlp_layer_types": ["dense" if k.endswith("dense") else "sparse" for k in kinds],
        "indexer_types": ["full"] * len(kinds),
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
    }
    json.dump(text, open(os.path.join(args.out, "config.json"), "w"), indent=1)
    print(f"wrote {args.out}: {len(specs)} tensors, {total / 1e9:.2f} G parameters")


if __name__ == "__main__":
    main()
