"""The tiny GLM-5.3-Flash configuration (Python stdlib only): config dicts, parameter counts by formula, sizes.

The config dicts use tests/fixtures/make_fixtures.py's conventions (its `_text` defaults and key set, its spec
shape), so the fixture builder's helpers (validate_spec, expected_tensors, build_config, the MTP and FP8
rewrites) apply unchanged. Token ids come from the tokenizer file, so config and tokenizer cannot disagree.
"""

import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))

import make_fixtures as mf  # noqa: E402  (pure python at import time; torch is imported lazily)

KDA, DSA = mf.KDA, mf.DSA
TOKENIZER_DIR = os.path.join(HERE, "tokenizer")
TOKENIZER_JSON = os.path.join(TOKENIZER_DIR, "tokenizer.json")
VOCAB_MULTIPLE = 128  # embedding rows padded past the tokenizer's ids, as GLM-5.3 pads 154856 to 154880
MAX_CHECKPOINT_BYTES = 24 * 1000 * 1000


def tokenizer_ids(path=TOKENIZER_JSON):
    with open(path, encoding="utf-8") as f:
        tj = json.load(f)
    added = {a["content"]: a["id"] for a in tj["added_tokens"]}
    n_vocab = max(max(tj["model"]["vocab"].values()), max(added.values())) + 1
    return dict(added=added, n_vocab=n_vocab, first_added=min(added.values()))


def _ids(ids=None):
    ids = ids or tokenizer_ids()
    a = ids["added"]
    return ids, a


def top_config(ids=None):
    _, a = _ids(ids)
    return dict(image_token_id=a["<|image|>"], video_token_id=a["<|video|>"],
                image_start_token_id=a["<|begin_of_image|>"], image_end_token_id=a["<|end_of_image|>"],
                video_start_token_id=a["<|begin_of_video|>"], video_end_token_id=a["<|end_of_video|>"],
                tie_word_embeddings=False)


def eos_ids(ids=None):
    """Generation stops at <|endoftext|>, <|user|> and <|observation|> (GLM's generation_config convention)."""
    _, a = _ids(ids)
    return [a["<|endoftext|>"], a["<|user|>"], a["<|observation|>"]]


def vocab_size(ids=None):
    ids, _ = _ids(ids)
    return -(-ids["n_vocab"] // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


# ----------------------------------------------------------------------------------------------------------
# The configurations
# ----------------------------------------------------------------------------------------------------------

def full_text(ids=None):
    """8 layers, KDA with a sparse-attention (DSA) layer every 4th (3, 7), dense layer 0, then sigmoid-routed MoE
    (16 experts, top 2, one shared); the KPool indexer keeps 256 tokens (64 pools of 4) plus the open tail."""
    ids, a = _ids(ids)
    layers = [KDA, KDA, KDA, DSA] * 2
    return mf._text(
        vocab_size=vocab_size(ids), pad_token_id=a["<|endoftext|>"],
        hidden_size=256, intermediate_size=512, moe_intermediate_size=56,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=128, kv_lora_rank=64,
        qk_nope_head_dim=64, qk_rope_head_dim=0, v_head_dim=64,
        n_routed_experts=16, num_experts_per_tok=2, n_shared_experts=1, routed_scaling_factor=2.5,
        n_group=1, topk_group=1, norm_topk_prob=True,
        index_n_heads=8, index_head_dim=64, index_topk=256, index_kpool=4,
        linear_num_heads=4, linear_head_dim=64, linear_conv_kernel_dim=4, linear_lower_bound=-5.0,
        hc_mult=4, hc_eps=1e-6, hc_sinkhorn_iters=20, swiglu_limit=10.0, rms_norm_eps=1e-5,
        layer_types=layers, mlp_layer_types=["dense"] + ["sparse"] * (len(layers) - 1),
        indexer_types=["full"] * len(layers),
    )


def full_vision(text):
    return dict(mf._vision(text["hidden_size"]), depth=2, hidden_size=64, num_heads=2, intermediate_size=128,
                projection_intermediate_size=256)


def smoke_text(ids=None):
    """The --smoke model: the fixtures' tiny shape (hidden 64, K K K D) with this tokenizer; index_topk 16 so
    that the smoke sequences go sparse."""
    ids, a = _ids(ids)
    return mf._text(vocab_size=vocab_size(ids), pad_token_id=a["<|endoftext|>"], index_topk=16,
                    layer_types=[KDA, KDA, KDA, DSA], mlp_layer_types=["dense", "sparse", "sparse", "sparse"])


def spec(size="full", ids=None):
    """A make_fixtures-style spec of the model (BF16 storage, one MTP layer, unsharded)."""
    ids = ids or tokenizer_ids()
    text = full_text(ids) if size == "full" else smoke_text(ids)
    vision = full_vision(text) if size == "full" else dict(mf._vision(text["hidden_size"]), depth=1)
    return dict(name=f"glm53-tiny-{size}", default=True, seed=0, T=0, storage="bf16", shard=False,
                top=top_config(ids), mtp_layers=1, mtp_seed=None, logits=False, export=False, debug=False,
                outdir="", notes="", text=text, vision=vision)


# ----------------------------------------------------------------------------------------------------------
# Parameter counts by formula (independent of make_fixtures.expected_tensors; a test checks they agree)
# ----------------------------------------------------------------------------------------------------------

def count_params(s):
    t, v = s["text"], s["vision"]
    D, V = t["hidden_size"], t["vocab_size"]
    n = t["hc_mult"]
    hc_site = (2 + n) * n * n * D + (2 + n) * n + 3
    C, Kh = t["linear_num_heads"] * t["linear_head_dim"], t["linear_head_dim"]
    kda = 3 * C * D + 3 * C * t["linear_conv_kernel_dim"] + 2 * (Kh * D + C * Kh) + C + t["linear_num_heads"] \
        + t["linear_num_heads"] * D + Kh + D * C
    H, qk, vh = t["num_attention_heads"], t["qk_nope_head_dim"] + t["qk_rope_head_dim"], t["v_head_dim"]
    qr, kr = t["q_lora_rank"], t["kv_lora_rank"]
    mla = qr * D + qr + H * qk * qr + (kr + t["qk_rope_head_dim"]) * D + kr + H * (t["qk_nope_head_dim"] + vh) * kr \
        + D * H * vh
    Hi, di = t["index_n_heads"], t["index_head_dim"]
    indexer = Hi * di * qr + di * D + 2 * di + Hi * D + t["index_kpool"] * di + di * D
    dense = 3 * D * t["intermediate_size"]
    E, I = t["n_routed_experts"], t["moe_intermediate_size"]
    expert = 3 * D * I
    moe = E * D + E + E * expert + 3 * D * I * t["n_shared_experts"]
    out = dict(embed=V * D, lm_head=V * D, final_norm=D, kda=0, dsa=0, indexer=0, dense=0, moe=0, hc=0,
               layer_norms=0)
    L = t["num_hidden_layers"]
    for i in range(L):
        out["layer_norms"] += 2 * D
        out["hc"] += 2 * hc_site
        if t["layer_types"][i] == KDA:
            out["kda"] += kda
        else:
            out["dsa"] += mla
            if t["indexer_types"][i] == "full":
                out["indexer"] += indexer
        out["dense" if t["mlp_layer_types"][i] == "dense" else "moe"] += dense if t["mlp_layer_types"][i] == "dense" else moe
    m = s["mtp_layers"]
    out["mtp"] = m * (mla + indexer + moe + 2 * D + 2 * D * D + 3 * D)  # + enorm, hnorm, eh_proj, shared_head.norm
    Hv, Do, Iv, Pi = v["hidden_size"], v["out_hidden_size"], v["intermediate_size"], v["projection_intermediate_size"]
    patch = Hv * v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 + Hv
    block = 2 * Hv + 3 * Hv * Hv + 3 * Hv + Hv * Hv + Hv + 2 * (Hv // v["num_heads"]) + 2 * (Iv * Hv + Iv) + Hv * Iv + Hv
    merge = Do * Hv * v["spatial_merge_size"] ** 2 + Do
    merger = Do * Do + 2 * Do + 3 * Do * Pi
    out["vision"] = patch + v["depth"] * block + Hv + merge + merger
    out["total"] = sum(out.values())
    # per decoded token: every dense weight, the top-k routed experts and the shared one, one embedding row
    active = out["total"] - out["embed"] + D - out["vision"] - out["mtp"]
    n_moe = sum(1 for x in t["mlp_layer_types"] if x == "sparse")
    active -= n_moe * (E - t["num_experts_per_tok"]) * expert
    out["active_per_token"] = active
    return out


def checkpoint_bytes(s):
    """Bytes of the BF16 checkpoint (HF's fp32-kept tensors stay F32) with the MTP layer and the vision tower."""
    return mf.estimate(s)["checkpoint_bytes"]


def fp8_checkpoint_bytes(s):
    s8 = dict(s, storage="fp8")
    return mf.estimate(s8)["checkpoint_bytes"]


def summary(s):
    p = count_params(s)
    return dict(params=p, checkpoint_bytes=checkpoint_bytes(s), fp8_checkpoint_bytes_main_layers=fp8_checkpoint_bytes(s),
                tensors=len(mf.expected_tensors(s)), problems=mf.validate_spec(s),
                limit_bytes=MAX_CHECKPOINT_BYTES)


def format_summary(s):
    info = summary(s)
    p = info["params"]
    lines = [f"model {s['name']}: {p['total']:,} parameters ({p['active_per_token']:,} active per decoded token), "
             f"{info['tensors']} checkpoint tensors"]
    for k in ("embed", "lm_head", "kda", "dsa", "indexer", "dense", "moe", "hc", "layer_norms", "final_norm", "mtp",
              "vision"):
        lines.append(f"  {k:12s} {p[k]:>12,}  {100.0 * p[k] / p['total']:5.1f}%")
    ok = info["checkpoint_bytes"] <= MAX_CHECKPOINT_BYTES
    lines.append(f"  BF16 checkpoint ~{info['checkpoint_bytes'] / 1e6:.2f} MB "
                 f"({'within' if ok else 'OVER'} the {MAX_CHECKPOINT_BYTES / 1e6:.0f} MB limit)")
    lines.append(f"  validation: {'OK' if not info['problems'] else info['problems']}")
    return "\n".join(lines), info


if __name__ == "__main__":
    for size in ("full", "smoke"):
        text, _ = format_summary(spec(size))
        print(text)
    sys.exit(0 if math.isfinite(1.0) else 1)
